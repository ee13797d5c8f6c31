#include "tools/chorus-perf/report.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace chorus::perf {
namespace {

TEST(Report, HeaderMatchesNcclTests) {
  std::string h = tableHeader();
  EXPECT_NE(h.find("\n#       size         count      type   redop    root     time   algbw   busbw "
                   "#wrong     time   algbw   busbw #wrong\n"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("out-of-place                       in-place"), std::string::npos);
}

TEST(Report, RowColumnsLineUpWithTheHeader) {
  std::string row = rowPreamble(1048576, 262144, "float", "sum", -1) +
                    rowHalf(123.456, 8.49, 12.74, 0) + rowHalf(120.0, 8.74, 13.11, std::nullopt);
  EXPECT_EQ(row,
            "     1048576        262144     float     sum      -1   123.46    8.49   12.74      0"
            "   120.00    8.74   13.11    N/A");
  // Same width as the header line (minus its leading "# ").
  std::istringstream in(tableHeader());
  std::string l1, l2;
  std::getline(in, l1);
  std::getline(in, l2);
  EXPECT_EQ(row.size(), l2.size());
}

TEST(Report, FitsLargeValuesInTheirColumns) {
  EXPECT_EQ(fitFloat(1.5, 7), "   1.50");
  EXPECT_EQ(fitFloat(12345.678, 7), "12345.7");
  EXPECT_EQ(fitFloat(1234567.0, 7), "1234567");
  EXPECT_EQ(fitFloat(123456789.0, 7).size(), 7u);
  EXPECT_EQ(fitFloat(1234.5, 6), "1234.5");
}

TEST(Report, FooterMatchesNcclTests) {
  EXPECT_EQ(footer(0, 1.5), "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.5 \n#\n");
  EXPECT_EQ(footer(2, 0.25).substr(0, 35), "# Out of bounds values : 2 FAILED\n#");
}

TEST(Report, WritesCsvAndJson) {
  std::vector<Record> recs = {
      {"allreduce", 2, 1024, 256, "float", "sum", -1, false, 10.5, 0.1, 0.1, 0},
      {"allreduce", 2, 1024, 256, "float", "sum", -1, true, 9.5, 0.11, 0.11, std::nullopt},
      {"reducescatter", 2, 1024, 128, "float", "sum", -1, false, 8.5, 0.1, 0.05, std::nullopt,
       0.126},
  };
  std::string dir = ::testing::TempDir();
  std::string csv = dir + "/chorus_perf_report_test.csv";
  std::string json = dir + "/chorus_perf_report_test.json";
  ASSERT_EQ(writeCsv(csv, recs), "");
  std::ifstream c(csv);
  std::string header, r1, r2, r3;
  std::getline(c, header);
  std::getline(c, r1);
  std::getline(c, r2);
  std::getline(c, r3);
  EXPECT_EQ(header,
            "collective,nranks,size,count,type,redop,root,placement,time_us,algbw_gbps,busbw_gbps,"
            "wrong,rel_error");
  EXPECT_EQ(r1, "allreduce,2,1024,256,float,sum,-1,out-of-place,10.500,0.1,0.1,0,");
  EXPECT_EQ(r2, "allreduce,2,1024,256,float,sum,-1,in-place,9.500,0.11,0.11,,");
  EXPECT_EQ(r3, "reducescatter,2,1024,128,float,sum,-1,out-of-place,8.500,0.1,0.05,,0.126");

  RunInfo info;
  info.coll = "allreduce";
  info.nranks = 2;
  ASSERT_EQ(writeJson(json, info, recs, 0, 0.105), "");
  std::ifstream j(json);
  nlohmann::json doc = nlohmann::json::parse(j);
  ASSERT_EQ(doc["results"].size(), 3u);
  EXPECT_FALSE(doc["results"][0].contains("rel_error"));
  EXPECT_DOUBLE_EQ(doc["results"][2]["rel_error"].get<double>(), 0.126);
  EXPECT_EQ(doc["results"][0]["placement"], "out-of-place");
  EXPECT_EQ(doc["results"][0]["wrong"], 0);
  EXPECT_TRUE(doc["results"][1]["wrong"].is_null());
  EXPECT_EQ(doc["config"]["collective"], "allreduce");
  EXPECT_DOUBLE_EQ(doc["avg_bus_bandwidth_gbps"].get<double>(), 0.105);
  std::remove(csv.c_str());
  std::remove(json.c_str());

  EXPECT_NE(writeCsv("/nonexistent-dir/x.csv", recs), "");
}

}  // namespace
}  // namespace chorus::perf
