// The verbs calls chorus makes outside the data path, as a table of function pointers: the real
// one comes from libibverbs.so.1 opened with dlopen at run time (so a chorus built with the
// rdma-core headers loads and runs on machines without the library), a test installs a fake
// one. The one place chorus loads libibverbs: the topology's ibverbs detector and the ibverbs
// transport both go through it. Built with CHORUS_HAVE_IBVERBS only (it needs the headers).
//
// The data-path calls (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) are not
// in the table: verbs.h makes them inline calls through the ops of the context a device was
// opened with, so whatever context open_device returned serves them too (a fake context fills
// its ops with fakes).
#pragma once

#ifdef CHORUS_HAVE_IBVERBS

#include <infiniband/verbs.h>

#include <string>

namespace chorus::ib {

struct VerbsApi {
  const char* origin;  ///< "libibverbs.so.1", or the fake's name
  int (*fork_init)();
  ibv_device** (*get_device_list)(int* num);
  void (*free_device_list)(ibv_device** list);
  const char* (*get_device_name)(ibv_device* dev);
  ibv_context* (*open_device)(ibv_device* dev);
  int (*close_device)(ibv_context* ctx);
  int (*query_device)(ibv_context* ctx, ibv_device_attr* attr);
  int (*query_port)(ibv_context* ctx, uint8_t port, ibv_port_attr* attr);
  int (*query_gid)(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid);
  ibv_pd* (*alloc_pd)(ibv_context* ctx);
  int (*dealloc_pd)(ibv_pd* pd);
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t length, int access);
  int (*dereg_mr)(ibv_mr* mr);
  ibv_comp_channel* (*create_comp_channel)(ibv_context* ctx);
  int (*destroy_comp_channel)(ibv_comp_channel* ch);
  ibv_cq* (*create_cq)(ibv_context* ctx, int cqe, void* cqContext, ibv_comp_channel* ch,
                       int vector);
  int (*destroy_cq)(ibv_cq* cq);
  int (*get_cq_event)(ibv_comp_channel* ch, ibv_cq** cq, void** cqContext);
  void (*ack_cq_events)(ibv_cq* cq, unsigned int n);
  ibv_qp* (*create_qp)(ibv_pd* pd, ibv_qp_init_attr* attr);
  int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int mask);
  int (*destroy_qp)(ibv_qp* qp);
};

/// The verbs in use: a test's (setVerbsForTesting), else libibverbs.so.1's, loaded once.
/// nullptr when the library cannot be loaded or lacks an entry point; *why then says which.
const VerbsApi* verbs(std::string* why);

/// Makes verbs() return `api` (nullptr: back to the library). For tests, before any verbs
/// object is made.
void setVerbsForTesting(const VerbsApi* api);

}  // namespace chorus::ib

#endif  // CHORUS_HAVE_IBVERBS
