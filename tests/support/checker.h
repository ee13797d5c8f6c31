// The symbolic checker: proves a schedule builder computes its collective, for one rank count
// and one set of arguments, without processes, sockets or arithmetic.
//
// Every rank's memory is laid out as the user's call lays it out (sizes from the collective's
// contract, root-only buffers absent on other ranks, in-place buffers inside one another at the
// NCCL / MPI offsets, scratch of Schedule::scratchBytes). Every element holds a symbolic value:
// the set of (rank, input element) contributions folded into it. Input element i of rank r
// starts as {r[i]}; output and scratch start poisoned. Copies and messages move values;
// reductions merge them, and a contribution arriving twice is double counting — an error even
// for operators (max, min) under which it would go unnoticed numerically.
//
// One-sided steps read the peer's memory as it is when they run: a get's `a` is laid out by the
// peer's call (its in-place aliasing included), and is bounds-checked against the peer's buffers.
// Notifies travel in the queue of sends, waits take them from the queue of receives.
//
// Quantization steps (schedule.h) make the check run on bytes: every byte of every buffer is a
// cell (an element's value fills its elemSize cells), because a quantized block is not a whole
// number of elements. kQuantize turns element values into a block whose bytes are tokens of that
// block (which element values it encodes, and each byte's position); messages, copies and gets
// move the tokens like any bytes. kDequantize and kRequantize accept only exactly whole blocks
// of the right element count, in order, and sum their values (a contribution twice is an error,
// as in any reduction); reducing a token as an element is an error. The data flow is proved;
// precision is the kernels' tests' business (tests/unit/kernels/quantize_test.cc).
//
// Checks, in order, stopping at the first failure:
//   1. Every range is in bounds of its buffer and element-aligned (on bytes: every range that is
//      reduced or quantized as elements); sizes agree within a step, and quantization steps'
//      sizes are those the call's config gives (CollDesc::quant) with sources and destination
//      disjoint;
//      copies and reductions do not partially overlap; deps point backwards; the in-place
//      aliasing the schedule declares is the one the call implies; out-of-place input is
//      never written; every step's peer is in Schedule::peers, and peer lists are symmetric.
//   2. When any rank reads a peer's memory: a happens-before proof over deps and matched
//      messages (every rank's start precedes the gets aimed at it; its end follows its steps).
//      Every write of an element some get reads must be ordered with that get, one way or the
//      other — else it is a race, and the value read depends on timing — and every get must
//      happen before the end of the rank it reads, or that rank may return mid-read. Together
//      they make the value each get reads the same in every execution, so the two runs below
//      stand for all of them.
//   3. Program-order execution, recvs and waits blocking, sends and notifies buffered, gets
//      reading the peer's memory at that point: every message is matched (FIFO per ordered pair,
//      equal sizes, a wait with a notify and a receive with a send), nothing deadlocks, no
//      message is left over. Alongside, every pair of steps touching the same element with at
//      least one write, and every two messages to (from) one peer, must be ordered by deps —
//      directly or transitively — so no concurrent executor can reorder them. This is exact,
//      not sampled.
//   4. Every output element equals the collective's definition; elements the collective does
//      not define (gaps between all-to-allv blocks) are left untouched.
//   5. A second execution in a seeded random order that respects only deps and per-pair FIFO
//      matching must give the same outputs (and, for a barrier, every rank must have heard
//      from every other before it finishes). Its sends and notifies are rendezvous — one
//      completes only with the receive or wait that takes it — so it also proves the schedule
//      cannot deadlock on a transport without buffering, which program order cannot show.
//
// Failures name the rank, step index and element. Runs in milliseconds for a few thousand
// steps; used by tests/unit/schedules and by anyone adding an algorithm.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "algorithms/common/schedule.h"
#include "src/base/status.h"

namespace chorus::sched {

using ScheduleBuilder = std::function<Schedule(const CollDesc&, int rank, int nranks)>;

struct CheckOptions {
  bool proveOrder = true;  // checks 2 and the deps proof of 3 (off only to test 5 alone)
  bool concurrent = true;  // run check 5
  uint64_t seed = 1;       // order of check 5
};

// Builds and finalize()s every rank's schedule with build(perRank[r], r, nranks), then checks.
// perRank has nranks entries (all-to-allv views differ per rank; the rest are usually equal).
Status checkAlgorithm(Coll coll, int nranks, std::span<const CollDesc> perRank,
                      const ScheduleBuilder& build, const CheckOptions& opts = {});

// The same description on every rank.
Status checkAlgorithm(Coll coll, int nranks, const CollDesc& desc, const ScheduleBuilder& build,
                      const CheckOptions& opts = {});

// Checks schedules exactly as given (deps included; nothing is finalized here), so tests can
// prove that a damaged schedule is caught.
Status checkSchedules(Coll coll, int nranks, std::span<const CollDesc> perRank,
                      std::span<const Schedule> schedules, const CheckOptions& opts = {});

}  // namespace chorus::sched
