// The block pool behind nonblocking requests (src/base/block_pool.h).
#include "src/base/block_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <thread>
#include <vector>

namespace chorus::pool {
namespace {

TEST(BlockPool, FreedBlocksAreReusedMostRecentFirst) {
  void* a = allocate(100);
  void* b = allocate(100);
  ASSERT_NE(a, b);
  release(a, 100);
  EXPECT_EQ(allocate(97), a);  // the same size class (97..128 bytes)
  release(b, 100);
  release(a, 100);
}

TEST(BlockPool, BlocksAreAlignedAndDisjoint) {
  std::vector<void*> blocks;
  for (size_t bytes : {1, 31, 32, 33, 200, 512}) {
    for (int i = 0; i < 50; ++i) {
      void* p = allocate(bytes);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignof(std::max_align_t), 0u) << bytes;
      std::memset(p, 0xab, bytes);  // writable for its whole size (ASan checks the rest)
      blocks.push_back(p);
    }
  }
  EXPECT_EQ(std::set<void*>(blocks.begin(), blocks.end()).size(), blocks.size());
  size_t i = 0;
  for (size_t bytes : {1, 31, 32, 33, 200, 512})
    for (int k = 0; k < 50; ++k) release(blocks[i++], bytes);
}

TEST(BlockPool, SlabsAreMappedOnlyWhenTheFreeBlocksRunOut) {
  constexpr size_t kBytes = 480;  // a size class nothing else here uses
  std::vector<void*> blocks;
  for (int i = 0; i < 100; ++i) blocks.push_back(allocate(kBytes));
  const size_t mapped = mappedBytes();
  for (void* p : blocks) release(p, kBytes);
  // The same depth again: served from the free list, nothing mapped.
  for (void*& p : blocks) p = allocate(kBytes);
  EXPECT_EQ(mappedBytes(), mapped);
  for (void* p : blocks) release(p, kBytes);
}

TEST(BlockPool, LargerObjectsGoToOperatorNew) {
  void* p = allocate(kMaxBlock + 1);
  std::memset(p, 1, kMaxBlock + 1);
  release(p, kMaxBlock + 1);
}

TEST(BlockPool, SharedObjectsFreedOnAnotherThread) {
  struct Obj {
    uint64_t v[10];
  };
  constexpr int kObjs = 20000;
  std::vector<std::shared_ptr<Obj>> objs;
  for (int i = 0; i < kObjs; ++i) {
    objs.push_back(std::allocate_shared<Obj>(Allocator<Obj>()));
    objs.back()->v[0] = static_cast<uint64_t>(i);
  }
  // Half dropped here, half on two other threads that allocate meanwhile.
  std::vector<std::shared_ptr<Obj>> a(objs.begin(), objs.begin() + kObjs / 4),
      b(objs.begin() + kObjs / 4, objs.begin() + kObjs / 2);
  objs.erase(objs.begin(), objs.begin() + kObjs / 2);
  auto churn = [](std::vector<std::shared_ptr<Obj>> mine) {
    for (auto& o : mine) {
      auto fresh = std::allocate_shared<Obj>(Allocator<Obj>());
      fresh->v[0] = o->v[0];
      o = std::move(fresh);
    }
    mine.clear();
  };
  std::thread t1(churn, std::move(a)), t2(churn, std::move(b));
  for (int i = 0; i < kObjs / 2; ++i) EXPECT_EQ(objs[i]->v[0], static_cast<uint64_t>(i + kObjs / 2));
  t1.join();
  t2.join();
}

}  // namespace
}  // namespace chorus::pool
