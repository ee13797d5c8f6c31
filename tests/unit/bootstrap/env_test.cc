#include "src/bootstrap/env.h"

#include <gtest/gtest.h>

#include "tests/unit/bootstrap/test_util.h"

namespace chorus::bootstrap {
namespace {

// Every variable parseEnv reads; each test starts with all of them unset (the CI machine may
// itself run under Slurm or torchrun) and the destructor puts the real environment back.
constexpr const char* kAllVars[] = {
    "CHORUS_ROOT", "CHORUS_RANK", "CHORUS_NRANKS", "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_NRANKS",
    "CHORUS_JOB_SECRET", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_RANK", "PMI_RANK",
    "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_NTASKS",
    "SLURM_LOCALID", "SLURM_NODEID", "SLURM_TASKS_PER_NODE", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT", "SLURM_JOB_ID", "SLURM_STEP_ID", "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid"};

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kAllVars) env_.unset(v);
  }
  void set(const std::string& name, const std::string& value) { env_.set(name, value); }

  EnvJob parseOk() {
    auto job = parseEnv();
    EXPECT_TRUE(job.ok()) << job.status().toString();
    return job.ok() ? *job : EnvJob{};
  }
  // The error's message, asserting it is an InvalidArgument.
  std::string parseError() {
    auto job = parseEnv();
    EXPECT_FALSE(job.ok());
    if (job.ok()) return "";
    EXPECT_EQ(job.status().code(), Code::kInvalidArgument) << job.status().toString();
    return job.status().message();
  }

  testing::ScopedEnv env_;
};

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST_F(EnvTest, ChorusVariables) {
  set("CHORUS_ROOT", "127.0.0.1:29500");
  set("CHORUS_RANK", "1");
  set("CHORUS_NRANKS", "4");
  set("CHORUS_LOCAL_RANK", "1");
  set("CHORUS_LOCAL_NRANKS", "2");
  EnvJob job = parseOk();
  EXPECT_EQ(job.rank, 1);
  EXPECT_EQ(job.nranks, 4);
  EXPECT_EQ(job.localRank, 1);
  EXPECT_EQ(job.localNranks, 2);
  EXPECT_EQ(job.root.toString(), "127.0.0.1:29500");
  EXPECT_CONTAINS(job.source, "CHORUS_RANK");
  EXPECT_CONTAINS(job.secretSource, "derived");
}

TEST_F(EnvTest, ChorusRankWithoutNranks) {
  set("CHORUS_ROOT", "127.0.0.1:29500");
  set("CHORUS_RANK", "1");
  EXPECT_CONTAINS(parseError(), "CHORUS_RANK is set but CHORUS_NRANKS is not");
}

TEST_F(EnvTest, ChorusNranksWithoutRank) {
  set("CHORUS_NRANKS", "3");
  EXPECT_CONTAINS(parseError(), "CHORUS_NRANKS is set but CHORUS_RANK is not");
}

TEST_F(EnvTest, ChorusWithoutRoot) {
  set("CHORUS_RANK", "0");
  set("CHORUS_NRANKS", "2");
  std::string m = parseError();
  EXPECT_CONTAINS(m, "CHORUS_RANK and CHORUS_NRANKS");
  EXPECT_CONTAINS(m, "CHORUS_ROOT");
}

TEST_F(EnvTest, MalformedValues) {
  set("CHORUS_ROOT", "127.0.0.1:29500");
  set("CHORUS_RANK", "one");
  set("CHORUS_NRANKS", "2");
  EXPECT_CONTAINS(parseError(), "CHORUS_RANK='one' is not an integer");
  set("CHORUS_RANK", "-1");
  EXPECT_CONTAINS(parseError(), "CHORUS_RANK=-1 is not >= 0");
  set("CHORUS_RANK", "0");
  set("CHORUS_NRANKS", "0");
  EXPECT_CONTAINS(parseError(), "CHORUS_NRANKS=0 is not >= 1");
  set("CHORUS_NRANKS", "2");
  set("CHORUS_ROOT", "no-port-here");
  EXPECT_CONTAINS(parseError(), "CHORUS_ROOT='no-port-here'");
}

TEST_F(EnvTest, Torchrun) {
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", "29500");
  set("RANK", "2");
  set("WORLD_SIZE", "4");
  set("LOCAL_RANK", "0");
  set("LOCAL_WORLD_SIZE", "2");
  set("TORCHELASTIC_RUN_ID", "run-42");
  EnvJob job = parseOk();
  EXPECT_EQ(job.rank, 2);
  EXPECT_EQ(job.nranks, 4);
  EXPECT_EQ(job.localRank, 0);
  EXPECT_EQ(job.localNranks, 2);
  // MASTER_PORT is torch.distributed's own store; ours is the next port.
  EXPECT_EQ(job.root.toString(), "127.0.0.1:29501");
  EXPECT_CONTAINS(job.source, "torchrun");
  EXPECT_CONTAINS(job.secretSource, "TORCHELASTIC_RUN_ID");
}

TEST_F(EnvTest, TorchrunRankOutOfRange) {
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", "29500");
  set("RANK", "3");
  set("WORLD_SIZE", "2");
  EXPECT_CONTAINS(parseError(), "RANK=3 is not < WORLD_SIZE=2");
}

TEST_F(EnvTest, TorchrunLocalRankOutOfRange) {
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", "29500");
  set("RANK", "3");
  set("WORLD_SIZE", "4");
  set("LOCAL_RANK", "2");
  set("LOCAL_WORLD_SIZE", "2");
  EXPECT_CONTAINS(parseError(), "LOCAL_RANK=2 is not < LOCAL_WORLD_SIZE=2");
}

TEST_F(EnvTest, TorchrunMissingMasterVariables) {
  set("RANK", "0");
  set("WORLD_SIZE", "2");
  std::string m = parseError();
  EXPECT_CONTAINS(m, "RANK and WORLD_SIZE");
  EXPECT_CONTAINS(m, "MASTER_ADDR");
  set("MASTER_ADDR", "127.0.0.1");
  EXPECT_CONTAINS(parseError(), "MASTER_ADDR is set but MASTER_PORT is not");
  set("MASTER_PORT", "65535");
  EXPECT_CONTAINS(parseError(), "MASTER_PORT=65535");
  set("MASTER_PORT", "http");
  EXPECT_CONTAINS(parseError(), "MASTER_PORT='http' is not an integer");
}

TEST_F(EnvTest, RankWithoutWorldSize) {
  set("RANK", "0");
  EXPECT_CONTAINS(parseError(), "RANK is set but WORLD_SIZE is not");
}

TEST_F(EnvTest, OpenMpiWithChorusRoot) {
  set("CHORUS_ROOT", "127.0.0.1:4000");
  set("OMPI_COMM_WORLD_RANK", "2");
  set("OMPI_COMM_WORLD_SIZE", "4");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  EnvJob job = parseOk();
  EXPECT_EQ(job.rank, 2);
  EXPECT_EQ(job.nranks, 4);
  EXPECT_EQ(job.localRank, 0);
  EXPECT_EQ(job.localNranks, 2);
  EXPECT_EQ(job.root.toString(), "127.0.0.1:4000");
  EXPECT_CONTAINS(job.source, "OMPI_COMM_WORLD_RANK");
}

TEST_F(EnvTest, OpenMpiWithMasterAddr) {
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", "4000");
  set("OMPI_COMM_WORLD_RANK", "0");
  set("OMPI_COMM_WORLD_SIZE", "1");
  EnvJob job = parseOk();
  EXPECT_EQ(job.root.port(), 4001);
}

TEST_F(EnvTest, OpenMpiWithoutRoot) {
  set("OMPI_COMM_WORLD_RANK", "0");
  set("OMPI_COMM_WORLD_SIZE", "2");
  std::string m = parseError();
  EXPECT_CONTAINS(m, "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE");
  EXPECT_CONTAINS(m, "CHORUS_ROOT");
  EXPECT_CONTAINS(m, "MASTER_ADDR");
}

TEST_F(EnvTest, ContradictionBetweenLaunchersOfTheSameSize) {
  set("CHORUS_ROOT", "127.0.0.1:4000");
  set("CHORUS_RANK", "1");
  set("CHORUS_NRANKS", "4");
  set("OMPI_COMM_WORLD_RANK", "2");
  set("OMPI_COMM_WORLD_SIZE", "4");
  EXPECT_CONTAINS(parseError(), "CHORUS_RANK=1 contradicts OMPI_COMM_WORLD_RANK=2");
}

TEST_F(EnvTest, AgreeingLaunchersAreFine) {
  set("CHORUS_ROOT", "127.0.0.1:4000");
  set("PMIX_RANK", "3");
  set("SLURM_PROCID", "3");
  set("SLURM_NTASKS", "4");
  set("SLURM_LOCALID", "1");
  set("SLURM_NODEID", "1");
  set("SLURM_TASKS_PER_NODE", "2(x2)");
  EnvJob job = parseOk();
  EXPECT_EQ(job.rank, 3);
  EXPECT_EQ(job.nranks, 4);
  EXPECT_CONTAINS(job.source, "PMIX_RANK");
  // PMIx gives no local rank; Slurm describes the same job and does.
  EXPECT_EQ(job.localRank, 1);
  EXPECT_EQ(job.localNranks, 2);
}

TEST_F(EnvTest, NestedLaunchersAreNotCompared) {
  // chorus-run -n 4 inside a one-task Slurm step.
  set("CHORUS_ROOT", "127.0.0.1:4000");
  set("CHORUS_RANK", "3");
  set("CHORUS_NRANKS", "4");
  set("SLURM_PROCID", "0");
  set("SLURM_NTASKS", "1");
  EXPECT_EQ(parseOk().rank, 3);
}

TEST_F(EnvTest, TorchrunUnderSlurmIsNotCompared) {
  // torchrun with one worker per node under srun: equal sizes, but elastic rendezvous may
  // number the nodes differently from Slurm.
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", "29500");
  set("RANK", "0");
  set("WORLD_SIZE", "2");
  set("TORCHELASTIC_RUN_ID", "abc");
  set("SLURM_PROCID", "1");
  set("SLURM_NTASKS", "2");
  EXPECT_EQ(parseOk().rank, 0);
}

TEST_F(EnvTest, PmixWithoutSize) {
  set("CHORUS_ROOT", "127.0.0.1:4000");
  set("PMIX_RANK", "0");
  std::string m = parseError();
  EXPECT_CONTAINS(m, "PMIX_RANK is set");
  EXPECT_CONTAINS(m, "SLURM_NTASKS");
}

TEST_F(EnvTest, Hydra) {
  set("CHORUS_ROOT", "127.0.0.1:4000");
  set("PMI_RANK", "1");
  set("PMI_SIZE", "3");
  set("MPI_LOCALRANKID", "1");
  set("MPI_LOCALNRANKS", "3");
  EnvJob job = parseOk();
  EXPECT_EQ(job.rank, 1);
  EXPECT_EQ(job.nranks, 3);
  EXPECT_EQ(job.localRank, 1);
  EXPECT_EQ(job.localNranks, 3);
}

TEST_F(EnvTest, Slurm) {
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", "4000");
  set("SLURM_PROCID", "6");
  set("SLURM_NTASKS", "7");
  set("SLURM_LOCALID", "2");
  set("SLURM_NODEID", "1");
  set("SLURM_TASKS_PER_NODE", "4,3");
  set("SLURM_JOB_ID", "1234");
  set("SLURM_STEP_ID", "0");
  EnvJob job = parseOk();
  EXPECT_EQ(job.rank, 6);
  EXPECT_EQ(job.nranks, 7);
  EXPECT_EQ(job.localRank, 2);
  EXPECT_EQ(job.localNranks, 3);
  EXPECT_CONTAINS(job.source, "SLURM_PROCID");
  EXPECT_CONTAINS(job.secretSource, "SLURM_JOB_ID");
}

TEST_F(EnvTest, SlurmTasksPerNodeForms) {
  set("CHORUS_ROOT", "127.0.0.1:4000");
  set("SLURM_PROCID", "0");
  set("SLURM_NTASKS", "12");
  set("SLURM_TASKS_PER_NODE", "4(x2),3,1");
  const std::pair<const char*, int> cases[] = {{"0", 4}, {"1", 4}, {"2", 3}, {"3", 1}, {"4", -1}};
  for (auto [node, expected] : cases) {
    set("SLURM_NODEID", node);
    EXPECT_EQ(parseOk().localNranks, expected) << "node " << node;
  }
  set("SLURM_TASKS_PER_NODE", "garbage(");
  EXPECT_EQ(parseOk().localNranks, -1);
}

TEST_F(EnvTest, NothingSet) {
  std::string m = parseError();
  EXPECT_CONTAINS(m, "no rank/size found");
  EXPECT_CONTAINS(m, "CHORUS_ROOT, CHORUS_RANK, CHORUS_NRANKS");
}

TEST_F(EnvTest, ExplicitSecret) {
  set("CHORUS_ROOT", "127.0.0.1:4000");
  set("CHORUS_RANK", "0");
  set("CHORUS_NRANKS", "1");
  set("CHORUS_JOB_SECRET", "00112233445566778899aabbccddeeff");
  EnvJob job = parseOk();
  EXPECT_EQ(secretToHex(job.secret), "00112233445566778899aabbccddeeff");
  EXPECT_EQ(job.secretSource, "CHORUS_JOB_SECRET");
  set("CHORUS_JOB_SECRET", "too-short");
  EXPECT_CONTAINS(parseError(), "CHORUS_JOB_SECRET must be 32 hex digits");
}

TEST_F(EnvTest, DerivedSecretDependsOnRootAndJobIds) {
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", "4000");
  set("RANK", "0");
  set("WORLD_SIZE", "2");
  Secret base = parseOk().secret;
  // Same environment on another rank: same secret.
  set("RANK", "1");
  EXPECT_EQ(parseOk().secret, base);
  set("TORCHELASTIC_RUN_ID", "x");
  Secret withRun = parseOk().secret;
  EXPECT_NE(withRun, base);
  set("TORCHELASTIC_RESTART_COUNT", "1");
  EXPECT_NE(parseOk().secret, withRun);
  set("MASTER_PORT", "4002");
  EXPECT_NE(parseOk().secret, withRun);
}

}  // namespace
}  // namespace chorus::bootstrap
