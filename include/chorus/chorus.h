/// chorus: collective communication for CPU and CUDA buffers.
///
/// The C ABI. Names, argument order and in-place conventions follow NCCL so that a framework's
/// NCCL backend ports by renaming: every collective ends with `(..., comm, stream)`. For host
/// buffers the blocking call has completed when it returns and `stream` is ignored (pass NULL);
/// for device buffers the operation is ordered on `stream`.
///
/// Every call returns a chorusResult_t; chorusGetLastError(comm) gives the full message of the
/// last failure on that communicator (or of the calling thread, when comm is NULL).
#ifndef CHORUS_CHORUS_H_
#define CHORUS_CHORUS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHORUS_MAJOR 0
#define CHORUS_MINOR 1
#define CHORUS_PATCH 0
/// Encoded as MAJOR*10000 + MINOR*100 + PATCH.
#define CHORUS_VERSION_CODE (CHORUS_MAJOR * 10000 + CHORUS_MINOR * 100 + CHORUS_PATCH)

/// Result of every call.
typedef enum {
  chorusSuccess = 0,
  chorusInvalidArgument = 1,  ///< a bad argument: null buffer, bad type/op, rank out of range...
  chorusInvalidUsage = 2,     ///< ranks disagree (count, type, op, root, collective), misuse
  chorusSystemError = 3,      ///< a system call failed (named in the message)
  chorusRemoteError = 4,      ///< a peer died or failed; the communicator is unusable
  chorusTimeout = 5,          ///< a wait exceeded the communicator's timeout
  chorusInternalError = 6,    ///< a bug in chorus
  chorusInProgress = 7,       ///< nonblocking operation not complete yet (chorusTest)
  chorusNumResults = 8
} chorusResult_t;

/// Element types. Values match NCCL's. 16- and 8-bit floats accumulate in float32.
typedef enum {
  chorusInt8 = 0,
  chorusChar = 0,
  chorusUint8 = 1,
  chorusInt32 = 2,
  chorusInt = 2,
  chorusUint32 = 3,
  chorusInt64 = 4,
  chorusUint64 = 5,
  chorusFloat16 = 6,
  chorusHalf = 6,
  chorusFloat32 = 7,
  chorusFloat = 7,
  chorusFloat64 = 8,
  chorusDouble = 8,
  chorusBfloat16 = 9,
  chorusFloat8e4m3 = 10,
  chorusFloat8e5m2 = 11,
  chorusNumTypes = 12,
  /* Not a type: makes every 32-bit value a value of the enum, so a bad one that a caller passes
   * reaches the library's check (C++ may not even load an enum outside its range). */
  chorusMaxDataType = 0x7fffffff
} chorusDataType_t;

/// Reduction operators. Values >= chorusNumOps are created with chorusRedOpCreatePreMulSum and
/// are valid only on the communicator that created them.
typedef enum {
  chorusSum = 0,
  chorusProd = 1,
  chorusMax = 2,
  chorusMin = 3,
  chorusAvg = 4,
  chorusNumOps = 5,
  chorusMaxRedOp = 0x7fffffff
} chorusRedOp_t;

/// Where the PreMulSum scalar lives.
typedef enum {
  chorusScalarDevice = 0,         ///< pointer to device memory, read when the collective runs
  chorusScalarHostImmediate = 1   ///< pointer to host memory, read at creation
} chorusScalarResidence_t;

/// Opaque communicator.
typedef struct chorusComm* chorusComm_t;
/// Opaque CUDA stream (cudaStream_t); NULL for host buffers.
typedef void* chorusStream_t;
/// Handle of a nonblocking operation; complete it with chorusWait or chorusTest.
typedef struct chorusRequest* chorusRequest_t;

#define CHORUS_UNIQUE_ID_BYTES 128
/// Identifies a job: the rendezvous address and a 128-bit secret. Created by one process with
/// chorusGetUniqueId and passed to all ranks (MPI broadcast, file, ...).
typedef struct {
  char internal[CHORUS_UNIQUE_ID_BYTES];
} chorusUniqueId;

/// Per-transport traffic counters of one communicator.
typedef struct {
  char name[16];                ///< "tcp", "shm", ...
  uint64_t bytesSentIntraHost;  ///< to peers on the same host
  uint64_t bytesRecvIntraHost;
  uint64_t bytesSentInterHost;  ///< to peers on other hosts
  uint64_t bytesRecvInterHost;
} chorusTransportStats_t;

/// Number of collectives run with one algorithm.
typedef struct {
  char name[32];  ///< "allreduce:ring", ...
  uint64_t count;
} chorusAlgoStats_t;

#define CHORUS_STATS_MAX_TRANSPORTS 8
#define CHORUS_STATS_MAX_ALGOS 64
/// Filled by chorusCommGetStats. Set `structSize = sizeof(chorusStats_t)` before the call.
typedef struct {
  size_t structSize;
  int numTransports;
  chorusTransportStats_t transports[CHORUS_STATS_MAX_TRANSPORTS];
  int numAlgos;
  chorusAlgoStats_t algos[CHORUS_STATS_MAX_ALGOS];
} chorusStats_t;

/// Symmetric: one float32 scale per group, scale = absmax / 7 (4 bits) or / 127 (8 bits), codes
/// in [-7, 7] or [-127, 127]. Asymmetric: a scale and an offset (the group's minimum) per group,
/// scale = (max - min) / 15 or / 255, codes in [0, 15] or [0, 255].
typedef enum { chorusQuantSymmetric = 0, chorusQuantAsymmetric = 1 } chorusQuantMode_t;
/// Nearest: ties to even. Stochastic: rounds up with probability equal to the fraction, from a
/// counter-based generator keyed by the seed and each element's index, so the expected value is
/// the input and the same (input, config) always gives the same bytes.
typedef enum { chorusRoundNearest = 0, chorusRoundStochastic = 1 } chorusQuantRounding_t;

/// How chorusQuantize encodes data. Start from CHORUS_QUANT_CONFIG_INIT, which also sets
/// structSize: a later chorus may append fields, and reads only the ones a caller's structSize
/// covers; fields this chorus does not know must be 0.
typedef struct {
  size_t structSize;  ///< sizeof(chorusQuantConfig_t) as the caller was compiled
  int bits;           ///< 4 or 8
  int mode;           ///< a chorusQuantMode_t
  int rounding;       ///< a chorusQuantRounding_t
  int reserved;       ///< 0
  size_t groupSize;   ///< elements per scale (and offset); even for 4 bits
  uint64_t seed;      ///< stochastic rounding only
} chorusQuantConfig_t;

/// int8, symmetric, 256 elements per scale (relative L2 error 0.70% on Gaussian data; 12.6% with
/// 4 bits), round to nearest.
#define CHORUS_QUANT_CONFIG_INIT \
  { sizeof(chorusQuantConfig_t), 8, chorusQuantSymmetric, chorusRoundNearest, 0, 256, 0 }

/* ---- Quantized collectives (ZeRO++ qgZ / qwZ) --------------------------------------------- */
/* Reduce-scatter, all-gather and all-reduce whose messages carry group-quantized data in the
 * format of chorusQuantize (bits, group size, symmetric or asymmetric, nearest or stochastic
 * rounding from `config`). Buffers, counts and in-place rules are those of the unquantized call.
 * Types float32, bfloat16, float16; ops chorusSum and chorusAvg (avg = sum / nranks exactly);
 * sums are taken in float32. Every rank must pass the same config (a rank that differs fails the
 * call on every rank exchanging with it, both configs named); the group size must not exceed the
 * count. Results are a deterministic function of the inputs and the config (seed included);
 * every value passes through quantization, one rank included. Across hosts of equal size the
 * reduce-scatter is ZeRO++'s two-hop qgZ (each value quantized twice whatever the rank count),
 * elsewhere one hop; chorusCommGetStats names the algorithm that ran. The all-gather's result
 * is bit-identical on every rank, the owner's own block included (it is decoded too). */

/// sendbuff holds nranks*recvcount elements; rank r receives the (quantized) sum of block r.
chorusResult_t chorusReduceScatterQuantized(const void* sendbuff, void* recvbuff,
                                            size_t recvcount, chorusDataType_t datatype,
                                            chorusRedOp_t op, const chorusQuantConfig_t* config,
                                            chorusComm_t comm, chorusStream_t stream);
/// recvbuff holds nranks*sendcount elements, rank r's block (quantized, decoded) at r*sendcount.
chorusResult_t chorusAllGatherQuantized(const void* sendbuff, void* recvbuff, size_t sendcount,
                                        chorusDataType_t datatype,
                                        const chorusQuantConfig_t* config, chorusComm_t comm,
                                        chorusStream_t stream);
/// A quantized reduce-scatter of group-aligned slices, then a quantized all-gather of the sums.
chorusResult_t chorusAllReduceQuantized(const void* sendbuff, void* recvbuff, size_t count,
                                        chorusDataType_t datatype, chorusRedOp_t op,
                                        const chorusQuantConfig_t* config, chorusComm_t comm,
                                        chorusStream_t stream);
chorusResult_t chorusIReduceScatterQuantized(const void* sendbuff, void* recvbuff,
                                             size_t recvcount, chorusDataType_t datatype,
                                             chorusRedOp_t op, const chorusQuantConfig_t* config,
                                             chorusComm_t comm, chorusStream_t stream,
                                             chorusRequest_t* request);
chorusResult_t chorusIAllGatherQuantized(const void* sendbuff, void* recvbuff, size_t sendcount,
                                         chorusDataType_t datatype,
                                         const chorusQuantConfig_t* config, chorusComm_t comm,
                                         chorusStream_t stream, chorusRequest_t* request);
chorusResult_t chorusIAllReduceQuantized(const void* sendbuff, void* recvbuff, size_t count,
                                         chorusDataType_t datatype, chorusRedOp_t op,
                                         const chorusQuantConfig_t* config, chorusComm_t comm,
                                         chorusStream_t stream, chorusRequest_t* request);

/* ---- Version, errors, environment ------------------------------------------------------- */

/// Writes CHORUS_VERSION_CODE of the loaded library.
chorusResult_t chorusGetVersion(int* version);
/// Short, static text of a result code.
const char* chorusGetErrorString(chorusResult_t result);
/// Full message of the last failure on `comm` (or of this thread when comm is NULL).
const char* chorusGetLastError(chorusComm_t comm);
/// Build features: the transports this build has, then its optional components, e.g.
/// "shm tcp hwloc mpi" (static text).
const char* chorusGetBuildFeatures(void);
/// The index-th registered algorithm: its collective ("allreduce"), name ("ring") and a
/// one-line description (static text). Returns chorusInvalidArgument past the last one.
chorusResult_t chorusGetAlgorithmInfo(int index, const char** collective, const char** name,
                                      const char** description);
/// The index-th transport of this build: its name (what CHORUS_TRANSPORT takes), a one-line
/// description, and why it cannot be used in this process (NULL when it can).
chorusResult_t chorusGetTransportInfo(int index, const char** name, const char** description,
                                      const char** unavailable);
/// The index-th CHORUS_* environment variable: name, default and doc (static text).
/// Returns chorusInvalidArgument when index is past the last one.
chorusResult_t chorusGetEnvInfo(int index, const char** name, const char** defaultValue,
                                const char** doc);

/* ---- Communicators ---------------------------------------------------------------------- */

/// Creates a unique id and starts its rendezvous store in the calling process (it serves until
/// every communicator created from the id has been destroyed, or the process exits).
chorusResult_t chorusGetUniqueId(chorusUniqueId* uniqueId);
/// Collective over `nranks` processes: joins the job identified by `commId` as `rank`.
chorusResult_t chorusCommInitRank(chorusComm_t* comm, int nranks, chorusUniqueId commId, int rank);
/// Joins the job described by the environment: CHORUS_ROOT/CHORUS_RANK/CHORUS_NRANKS, torchrun's
/// MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE, or the rank and size of mpirun/srun
/// (OMPI_COMM_WORLD_*, PMIX_RANK, SLURM_PROCID/SLURM_NTASKS) with the root from CHORUS_ROOT or
/// MASTER_ADDR/MASTER_PORT.
chorusResult_t chorusCommInitFromEnv(chorusComm_t* comm);
/// Collective over `comm`: ranks with the same color form a new communicator, ordered by key then
/// by rank in `comm`. color < 0 (CHORUS_SPLIT_NOCOLOR) yields *newcomm = NULL.
#define CHORUS_SPLIT_NOCOLOR (-1)
chorusResult_t chorusCommSplit(chorusComm_t comm, int color, int key, chorusComm_t* newcomm);
/// Collective over `comm`: splits it by where ranks run, like MPI_Comm_split_type. The ranks on
/// the same host (CHORUS_SPLIT_HOST: same host id, see CHORUS_HOST_ID) or on the same host and
/// NUMA node (CHORUS_SPLIT_NUMA: the node of the rank's CPU affinity; a rank bound to CPUs of
/// several nodes is a group of its own) form a new communicator, ordered by key then by rank.
#define CHORUS_SPLIT_HOST 1
#define CHORUS_SPLIT_NUMA 2
chorusResult_t chorusCommSplitType(chorusComm_t comm, int type, int key, chorusComm_t* newcomm);
/// Called by every rank of `comm` that is not in excludeRanks[0..excludeCount) (typically the
/// ranks a failure named), all with the same list: a new communicator of those ranks, in the same
/// order. It does not use `comm`'s connections, so it works after `comm` has failed; it meets
/// the other ranks again through the job's bootstrap store, so the process serving that store
/// (the caller of chorusGetUniqueId, or rank 0 with chorusCommInitFromEnv) must not be excluded.
/// `comm` is left as it was (destroy or abort it as usual). Bounded by `comm`'s timeout.
chorusResult_t chorusCommShrink(chorusComm_t comm, const int* excludeRanks, int excludeCount,
                                chorusComm_t* newcomm);
/// Frees the communicator. Not collective; outstanding nonblocking operations are completed first
/// (bounded by the timeout).
chorusResult_t chorusCommDestroy(chorusComm_t comm);
/// Frees the communicator without waiting: outstanding operations fail, peers are told.
chorusResult_t chorusCommAbort(chorusComm_t comm);
chorusResult_t chorusCommCount(const chorusComm_t comm, int* count);
chorusResult_t chorusCommUserRank(const chorusComm_t comm, int* rank);
/// Bounded waits of this communicator, in seconds (default CHORUS_TIMEOUT).
chorusResult_t chorusCommSetTimeout(chorusComm_t comm, double seconds);
/// Traffic per transport (intra- vs inter-host) and collectives run per algorithm.
chorusResult_t chorusCommGetStats(const chorusComm_t comm, chorusStats_t* stats);

/// Registered memory (docs/design.md, "Registered memory").
///
/// chorusMemAlloc returns `size` bytes (rounded up to whole pages, zero-filled) in a segment the
/// other ranks on this host can map: its own anonymous memory file, kept open for the life of
/// the allocation and named nowhere in the file system, so nothing is left behind when the
/// process ends. Over shared memory, peers read such a buffer through a mapping they make once
/// and keep: no system call and no page pinning per call. Every rank may allocate its own.
/// Errors: ptr NULL or size 0 (chorusInvalidArgument).
chorusResult_t chorusMemAlloc(void** ptr, size_t size);
/// Frees what chorusMemAlloc returned. A pointer it did not return (or one inside an
/// allocation) is chorusInvalidArgument, a second free chorusInvalidUsage; freeing memory still
/// registered with a communicator is chorusInvalidUsage (deregister it first). Nothing is freed
/// on an error.
chorusResult_t chorusMemFree(void* ptr);
/// Registers [buff, buff + size) with `comm` and returns a handle for chorusCommDeregister.
/// Local (not collective); the same range may be registered several times, each with its own
/// handle. For chorusMemAlloc memory the registration pins the allocation: chorusMemFree
/// refuses it until every handle is deregistered (or its communicator destroyed). For other
/// memory (malloc, stack) registration only checks and records the range: peers on this host
/// still reach it through cross-memory attach, which pins its pages for each call — the
/// zero-copy path needs chorusMemAlloc memory.
chorusResult_t chorusCommRegister(const chorusComm_t comm, void* buff, size_t size, void** handle);
/// Releases a handle of chorusCommRegister. A handle that is not one of `comm`'s live
/// registrations (NULL, garbage, another communicator's, already deregistered) is an error
/// naming which; it is never dereferenced. chorusCommDestroy and chorusCommAbort release every
/// handle still registered.
chorusResult_t chorusCommDeregister(const chorusComm_t comm, void* handle);

/// Creates op = sum of (scalar * input) over ranks. `scalar` has type `datatype`.
chorusResult_t chorusRedOpCreatePreMulSum(chorusRedOp_t* op, void* scalar, chorusDataType_t datatype,
                                          chorusScalarResidence_t residence, chorusComm_t comm);
chorusResult_t chorusRedOpDestroy(chorusRedOp_t op, chorusComm_t comm);

/* ---- Collectives (blocking) ------------------------------------------------------------- */
/* In place: AllReduce/Broadcast/Reduce when sendbuff == recvbuff; AllGather when
 * sendbuff == recvbuff + rank*sendcount; ReduceScatter when recvbuff == sendbuff + rank*recvcount. */

chorusResult_t chorusAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                               chorusDataType_t datatype, chorusRedOp_t op, chorusComm_t comm,
                               chorusStream_t stream);
chorusResult_t chorusBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                               chorusDataType_t datatype, int root, chorusComm_t comm,
                               chorusStream_t stream);
/// recvbuff is used on root only (may be NULL elsewhere).
chorusResult_t chorusReduce(const void* sendbuff, void* recvbuff, size_t count,
                            chorusDataType_t datatype, chorusRedOp_t op, int root,
                            chorusComm_t comm, chorusStream_t stream);
/// recvbuff holds nranks*sendcount elements, rank r's block at r*sendcount.
chorusResult_t chorusAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                               chorusDataType_t datatype, chorusComm_t comm,
                               chorusStream_t stream);
/// sendbuff holds nranks*recvcount elements; rank r receives the reduction of block r.
chorusResult_t chorusReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                   chorusDataType_t datatype, chorusRedOp_t op,
                                   chorusComm_t comm, chorusStream_t stream);
/// Block j of sendbuff (count elements) goes to rank j; block i of recvbuff comes from rank i.
chorusResult_t chorusAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                              chorusDataType_t datatype, chorusComm_t comm,
                              chorusStream_t stream);
/// MPI_Alltoallv-shaped: counts and displacements in elements, nranks entries each.
chorusResult_t chorusAllToAllv(const void* sendbuff, const size_t sendcounts[],
                               const size_t sdispls[], void* recvbuff, const size_t recvcounts[],
                               const size_t rdispls[], chorusDataType_t datatype,
                               chorusComm_t comm, chorusStream_t stream);
/// recvbuff (root only) holds nranks*sendcount elements in rank order.
chorusResult_t chorusGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            chorusDataType_t datatype, int root, chorusComm_t comm,
                            chorusStream_t stream);
/// sendbuff (root only) holds nranks*recvcount elements; rank r receives block r.
chorusResult_t chorusScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                             chorusDataType_t datatype, int root, chorusComm_t comm,
                             chorusStream_t stream);
chorusResult_t chorusBarrier(chorusComm_t comm, chorusStream_t stream);

/* ---- Point to point and groups ---------------------------------------------------------- */

chorusResult_t chorusSend(const void* sendbuff, size_t count, chorusDataType_t datatype, int peer,
                          chorusComm_t comm, chorusStream_t stream);
chorusResult_t chorusRecv(void* recvbuff, size_t count, chorusDataType_t datatype, int peer,
                          chorusComm_t comm, chorusStream_t stream);
/// Between GroupStart and GroupEnd, Send/Recv (and collectives) are only recorded; GroupEnd
/// posts them together and, for host buffers, returns when all have completed. Groups nest.
chorusResult_t chorusGroupStart(void);
chorusResult_t chorusGroupEnd(void);

/* ---- Nonblocking forms ------------------------------------------------------------------ */
/* Same arguments plus a request. Buffers must stay untouched until chorusWait/chorusTest reports
 * completion. Operations on one communicator complete in the order they were started. */

chorusResult_t chorusIAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                chorusDataType_t datatype, chorusRedOp_t op, chorusComm_t comm,
                                chorusStream_t stream, chorusRequest_t* request);
chorusResult_t chorusIBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                chorusDataType_t datatype, int root, chorusComm_t comm,
                                chorusStream_t stream, chorusRequest_t* request);
chorusResult_t chorusIReduce(const void* sendbuff, void* recvbuff, size_t count,
                             chorusDataType_t datatype, chorusRedOp_t op, int root,
                             chorusComm_t comm, chorusStream_t stream, chorusRequest_t* request);
chorusResult_t chorusIAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                chorusDataType_t datatype, chorusComm_t comm,
                                chorusStream_t stream, chorusRequest_t* request);
chorusResult_t chorusIReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                    chorusDataType_t datatype, chorusRedOp_t op,
                                    chorusComm_t comm, chorusStream_t stream,
                                    chorusRequest_t* request);
chorusResult_t chorusIAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                               chorusDataType_t datatype, chorusComm_t comm,
                               chorusStream_t stream, chorusRequest_t* request);
chorusResult_t chorusIAllToAllv(const void* sendbuff, const size_t sendcounts[],
                                const size_t sdispls[], void* recvbuff,
                                const size_t recvcounts[], const size_t rdispls[],
                                chorusDataType_t datatype, chorusComm_t comm,
                                chorusStream_t stream, chorusRequest_t* request);
chorusResult_t chorusIGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                             chorusDataType_t datatype, int root, chorusComm_t comm,
                             chorusStream_t stream, chorusRequest_t* request);
chorusResult_t chorusIScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                              chorusDataType_t datatype, int root, chorusComm_t comm,
                              chorusStream_t stream, chorusRequest_t* request);
chorusResult_t chorusIBarrier(chorusComm_t comm, chorusStream_t stream, chorusRequest_t* request);
chorusResult_t chorusISend(const void* sendbuff, size_t count, chorusDataType_t datatype,
                           int peer, chorusComm_t comm, chorusStream_t stream,
                           chorusRequest_t* request);
chorusResult_t chorusIRecv(void* recvbuff, size_t count, chorusDataType_t datatype, int peer,
                           chorusComm_t comm, chorusStream_t stream, chorusRequest_t* request);

/// Blocks until the request completes (bounded by the communicator's timeout), returns its
/// result and frees it. *request is set to NULL.
chorusResult_t chorusWait(chorusRequest_t* request);
/// Never blocks. *done = 1 when complete: then the result is returned, the request is freed and
/// *request set to NULL. Otherwise *done = 0 and chorusSuccess.
chorusResult_t chorusTest(chorusRequest_t* request, int* done);

/* ---- Quantization (local: no communication) --------------------------------------------- */
/* Group quantization as the quantized collectives use it, for callers that keep their own
 * residuals (error feedback) or store compressed data. The packed layout: one record per group of
 * config->groupSize elements (the last group may be shorter), records back to back, each
 * [float32 scale][float32 offset, asymmetric only][codes], little-endian; codes are one byte per
 * element for 8 bits (int8 when symmetric, uint8 when asymmetric) or two per byte for 4 bits,
 * element 2k in the low nibble of byte k (4-bit two's complement when symmetric). Inputs are
 * float32, bfloat16 or float16; the arithmetic is float32. Host buffers only for now: stream
 * must be NULL. */

/// *bytes = the size of `count` elements quantized with `config`.
chorusResult_t chorusQuantizedSize(size_t count, const chorusQuantConfig_t* config, size_t* bytes);
/// Quantizes `count` elements of `datatype` at `input` into `quantized`
/// (chorusQuantizedSize(count) bytes, not overlapping the input).
chorusResult_t chorusQuantize(const void* input, void* quantized, size_t count,
                              chorusDataType_t datatype, const chorusQuantConfig_t* config,
                              chorusStream_t stream);
/// Decodes `count` elements quantized with `config` into `output`, rounded once into `datatype`.
chorusResult_t chorusDequantize(const void* quantized, void* output, size_t count,
                                chorusDataType_t datatype, const chorusQuantConfig_t* config,
                                chorusStream_t stream);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CHORUS_CHORUS_H_
