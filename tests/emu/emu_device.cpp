// The emulator's thread scheduler: every CUDA thread of a block is a fiber with its own stack, run
// in turn on the calling host thread. A thread runs until it finishes or waits at __syncthreads() or a warp
// collective; when every live thread waits, the barrier or the warps' collectives are released together.
// Blocks run one after another, as a GPU with one SM would run them. A launch whose first block never
// synchronised runs its other blocks' threads as plain calls, one after another (BSW_EMU_FIBERS=always turns
// that off).
#include <ucontext.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_emu.hpp"

// Switching fibers: on x86-64 a few instructions that save the callee-saved registers, the SSE and x87
// control words and the stack pointer (ucontext's swapcontext also saves the signal mask, a system call per
// switch, which made kernels with warp collectives over large tensors crawl); elsewhere ucontext.
#if defined(__x86_64__) && !defined(BSW_EMU_UCONTEXT)
extern "C" void bsw_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl bsw_emu_switch
  .type bsw_emu_switch, @function
bsw_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size bsw_emu_switch, .-bsw_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");
#define BSW_EMU_ASM_SWITCH 1
#endif

namespace bsw::emu {
namespace {

struct Fiber {
#ifdef BSW_EMU_ASM_SWITCH
  void* sp = nullptr;
#else
  ucontext_t context{};
#endif
};

// Makes `f` start in entry() on the given stack the first time it is switched to.
void prepare(Fiber& f, char* stack, std::size_t bytes, void (*entry)()) {
#ifdef BSW_EMU_ASM_SWITCH
  auto top = reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t{15};
  auto* frame = reinterpret_cast<uint64_t*>(top - 72);  // entry() starts with rsp = top - 8, as after a call
  uint32_t control[2] = {0, 0};
  asm volatile("stmxcsr %0" : "=m"(control[0]));
  asm volatile("fnstcw %0" : "=m"(control[1]));
  std::memcpy(&frame[0], control, sizeof(control));
  for (int i = 1; i <= 6; ++i) frame[i] = 0;  // r15, r14, r13, r12, rbx, rbp
  frame[7] = reinterpret_cast<uint64_t>(entry);
  frame[8] = 0;  // entry() never returns
  f.sp = frame;
#else
  static ucontext_t prototype;
  static bool have_prototype = false;
  if (!have_prototype) {
    getcontext(&prototype);
    have_prototype = true;
  }
  f.context = prototype;
  f.context.uc_stack.ss_sp = stack;
  f.context.uc_stack.ss_size = bytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, entry, 0);
#endif
}

void switch_to(Fiber& from, Fiber& to) {
#ifdef BSW_EMU_ASM_SWITCH
  bsw_emu_switch(&from.sp, to.sp);
#else
  swapcontext(&from.context, &to.context);
#endif
}

constexpr std::size_t kStackBytes = 64 * 1024;
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr std::size_t kMaxSharedBytes = 48 * 1024;

enum class Wait { running, barrier, shuffle, any, done };

struct Thread {
  Fiber fiber;
  ThreadContext where;
  Wait wait = Wait::running;
  unsigned mask = 0;
  Site site{"", 0};
  uint64_t bits = 0;
  int source = 0;
  bool predicate = false;
  uint64_t result_bits = 0;
  bool result_any = false;
};

struct Block {
  std::vector<Thread> threads;
  Fiber scheduler;
  Thread* running = nullptr;
  const std::function<void()>* body = nullptr;
  bool synchronised = false;  // some thread waited at a barrier or a warp collective
  bool direct = false;        // threads run as plain calls, one after another (no fibers)
  std::string direct_error;
  std::set<void*> shared_seen;  // __shared__ arrays this block has reached (and NaN-filled)
};

bool same_site(const Site& a, const Site& b) {
  return a.line == b.line && std::strcmp(a.file, b.file) == 0;
}

std::string site_name(const Site& s) {
  return std::string(s.file) + ":" + std::to_string(s.line);
}

// BSW_EMU_ORDER=reverse runs the threads of a block, and the blocks of a grid, last first: a race that the
// default order hides (a thread reading what a later one writes without a barrier) shows in the other.
bool reverse_order() {
  static const bool reverse = [] {
    const char* v = std::getenv("BSW_EMU_ORDER");
    return v != nullptr && std::string(v) == "reverse";
  }();
  return reverse;
}

Block* g_block = nullptr;
std::unique_ptr<char[]> g_stacks;
std::size_t g_stack_threads = 0;

void thread_entry() {
  Block& b = *g_block;
  (*b.body)();
  b.running->wait = Wait::done;
  switch_to(b.running->fiber, b.scheduler);  // a finished thread is never resumed
}

const char* wait_name(Wait w) {
  switch (w) {
    case Wait::running:
      return "running";
    case Wait::barrier:
      return "__syncthreads";
    case Wait::shuffle:
      return "__shfl_xor_sync";
    case Wait::any:
      return "__any_sync";
    case Wait::done:
      return "exited";
  }
  return "?";
}

void suspend(Wait w) {
  Block& b = *g_block;
  Thread& t = *b.running;
  if (b.direct) {
    // Block 0 of this launch never synchronised, so the rest run without fibers; a block that does is a
    // kernel whose synchronisation depends on the block, which the emulator will not guess about.
    if (b.direct_error.empty())
      b.direct_error = std::string(wait_name(w)) +
                       " in a block although the first block the launch ran never synchronised (set "
                       "BSW_EMU_FIBERS=always to run every block on fibers)";
    t.result_bits = t.bits;
    t.result_any = t.predicate;
    return;
  }
  b.synchronised = true;
  t.wait = w;
  switch_to(t.fiber, b.scheduler);
}

// Releases the collective of warp w if every live lane waits in the same one. Returns false and sets
// `error` when the collective can never complete correctly (a lane of its mask exited or is missing).
bool release_warp(Block& b, std::size_t w, bool& released, std::string& error) {
  const std::size_t first = w * 32, last = std::min(b.threads.size(), first + 32);
  Wait kind = Wait::running;
  std::size_t waiting = 0, alive = 0;
  for (std::size_t i = first; i < last; ++i) {
    const Wait s = b.threads[i].wait;
    if (s == Wait::done) continue;
    ++alive;
    if (s == Wait::shuffle || s == Wait::any) {
      if (kind != Wait::running && kind != s) {
        error = "lanes of warp " + std::to_string(w) + " wait in different warp collectives";
        return false;
      }
      kind = s;
      ++waiting;
    }
  }
  if (waiting == 0 || waiting != alive) return true;
  const Thread* leader = nullptr;
  for (std::size_t i = first; i < last; ++i) {
    const Thread& t = b.threads[i];
    if (t.wait != kind) continue;
    if (leader == nullptr) leader = &t;
    const unsigned own = static_cast<unsigned>(i - first);
    if (!same_site(t.site, leader->site) || t.mask != leader->mask || (t.mask >> own & 1u) == 0) {
      std::ostringstream m;
      m << "lanes of warp " << w << " meet in " << wait_name(kind) << " at " << site_name(leader->site)
        << " with mask 0x" << std::hex << leader->mask << std::dec << " and at " << site_name(t.site)
        << " with mask 0x" << std::hex << t.mask << std::dec << " (lane " << own
        << "): a collective needs every lane of its mask at the same call with the same mask";
      error = m.str();
      return false;
    }
    for (unsigned lane = 0; lane < 32; ++lane) {
      if ((t.mask >> lane & 1u) == 0) continue;
      const std::size_t j = first + lane;
      if (j >= last || b.threads[j].wait != kind) {
        std::ostringstream m;
        m << wait_name(kind) << " with mask 0x" << std::hex << t.mask << std::dec << " in warp " << w
          << ": lane " << lane << (j >= last ? " does not exist (partial warp)" : " has exited");
        error = m.str();
        return false;
      }
    }
  }
  bool any = false;
  for (std::size_t i = first; i < last; ++i)
    if (b.threads[i].wait == kind && (leader->mask >> (i - first) & 1u) != 0)
      any = any || b.threads[i].predicate;
  for (std::size_t i = first; i < last; ++i) {
    Thread& t = b.threads[i];
    if (t.wait != kind) continue;
    if (kind == Wait::shuffle) {
      const std::size_t j = first + static_cast<std::size_t>(t.source);
      if (t.source < 0 || t.source >= 32 || j >= last || b.threads[j].wait != Wait::shuffle) {
        error = "__shfl_xor_sync in warp " + std::to_string(w) + " reads lane " + std::to_string(t.source) +
                ", which is not in the exchange";
        return false;
      }
      t.result_bits = b.threads[j].bits;
    } else {
      t.result_any = any;
    }
  }
  for (std::size_t i = first; i < last; ++i)
    if (b.threads[i].wait == kind) b.threads[i].wait = Wait::running;
  released = true;
  return true;
}

// Runs one block to the end. Returns an empty string, or why the block cannot finish.
std::string run_block(Block& b) {
  for (std::size_t i = 0; i < b.threads.size(); ++i) {
    Thread& t = b.threads[i];
    prepare(t.fiber, g_stacks.get() + i * kStackBytes, kStackBytes, thread_entry);
    t.wait = Wait::running;
  }
  b.shared_seen.clear();
  const std::size_t n = b.threads.size();
  for (;;) {
    for (std::size_t k = 0; k < n; ++k) {
      Thread& t = b.threads[reverse_order() ? n - 1 - k : k];
      if (t.wait != Wait::running) continue;
      b.running = &t;
      switch_to(b.scheduler, t.fiber);
    }
    std::size_t alive = 0, at_barrier = 0;
    for (const Thread& t : b.threads) {
      if (t.wait != Wait::done) ++alive;
      if (t.wait == Wait::barrier) ++at_barrier;
    }
    if (alive == 0) return {};
    if (at_barrier == alive) {
      const Thread* first = nullptr;
      for (const Thread& t : b.threads) {
        if (t.wait != Wait::barrier) continue;
        if (first == nullptr) first = &t;
        if (!same_site(t.site, first->site))
          return "threads of the block wait at different __syncthreads() calls (" + site_name(first->site) +
                 " and " + site_name(t.site) + "): undefined on a GPU";
      }
      for (Thread& t : b.threads)
        if (t.wait == Wait::barrier) t.wait = Wait::running;
      continue;
    }
    bool released = false;
    std::string error;
    for (std::size_t w = 0; w * 32 < b.threads.size(); ++w)
      if (!release_warp(b, w, released, error)) return error;
    if (!released) {
      std::ostringstream m;
      m << "deadlock: " << at_barrier << " of " << alive
        << " live threads wait at __syncthreads and the rest wait elsewhere (";
      for (std::size_t i = 0; i < b.threads.size(); ++i)
        if (b.threads[i].wait != Wait::barrier && b.threads[i].wait != Wait::done) {
          m << "thread " << i << " in " << wait_name(b.threads[i].wait);
          break;
        }
      m << ")";
      return m.str();
    }
  }
}

// Runs one block's threads as plain calls (a launch whose first block never synchronised).
std::string run_block_direct(Block& b) {
  b.shared_seen.clear();
  const std::size_t n = b.threads.size();
  for (std::size_t k = 0; k < n; ++k) {
    Thread& t = b.threads[reverse_order() ? n - 1 - k : k];
    b.running = &t;
    (*b.body)();
    if (!b.direct_error.empty()) return b.direct_error;
  }
  return {};
}

bool fibers_always() {
  static const bool always = [] {
    const char* v = std::getenv("BSW_EMU_FIBERS");
    return v != nullptr && std::string(v) == "always";
  }();
  return always;
}

}  // namespace

const ThreadContext& current() {
  return g_block->running->where;
}

void syncthreads_at(Site site) {
  g_block->running->site = site;
  suspend(Wait::barrier);
}

uint64_t warp_shuffle(unsigned mask, uint64_t bits, int source_lane, Site site) {
  Thread& t = *g_block->running;
  t.site = site;
  t.mask = mask;
  t.bits = bits;
  t.source = source_lane;
  suspend(Wait::shuffle);
  return t.result_bits;
}

bool warp_any(unsigned mask, bool predicate, Site site) {
  Thread& t = *g_block->running;
  t.site = site;
  t.mask = mask;
  t.predicate = predicate;
  suspend(Wait::any);
  return t.result_any;
}

void shared_memory(void* p, std::size_t bytes) {
  if (g_block->shared_seen.insert(p).second) std::memset(p, 0xFF, bytes);
}

std::string check_pointer_argument(const void* p, int index) {
  if (p == nullptr || device_range_ok(p, 1)) return {};
  std::ostringstream m;
  m << "kernel argument " << index << " (" << p << ") points outside every device allocation";
  return m.str();
}

void launch(dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream, const char* file, int line,
            std::function<void()> body) {
  const std::string where = std::string(file) + ":" + std::to_string(line);
  const uint64_t threads = static_cast<uint64_t>(block.x) * block.y * block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock || block.z > 64 || grid.x == 0 || grid.y == 0 ||
      grid.z == 0 || grid.x > 0x7FFFFFFFu || grid.y > 65535 || grid.z > 65535 ||
      shared_bytes > kMaxSharedBytes) {
    std::ostringstream m;
    m << where << ": invalid launch configuration grid (" << grid.x << ", " << grid.y << ", " << grid.z
      << ") block (" << block.x << ", " << block.y << ", " << block.z << ") shared " << shared_bytes;
    set_launch_error(cudaErrorInvalidConfiguration, m.str());
    return;
  }
  auto run = [grid, block, threads, where, body = std::move(body)]() {
    if (g_stack_threads < threads) {
      g_stacks.reset(new char[threads * kStackBytes]);
      g_stack_threads = threads;
    }
    Block b;
    b.threads.resize(threads);
    b.body = &body;
    for (std::size_t i = 0; i < threads; ++i) {
      ThreadContext& c = b.threads[i].where;
      c.thread.x = static_cast<unsigned>(i % block.x);
      c.thread.y = static_cast<unsigned>(i / block.x % block.y);
      c.thread.z = static_cast<unsigned>(i / (static_cast<std::size_t>(block.x) * block.y));
      c.block_dim = block;
      c.grid_dim = grid;
    }
    Block* outer = g_block;
    g_block = &b;
    const uint64_t blocks = static_cast<uint64_t>(grid.x) * grid.y * grid.z;
    for (uint64_t k = 0; k < blocks; ++k) {
      const uint64_t linear = reverse_order() ? blocks - 1 - k : k;
      const auto x = static_cast<unsigned>(linear % grid.x),
                 y = static_cast<unsigned>(linear / grid.x % grid.y),
                 z = static_cast<unsigned>(linear / (static_cast<uint64_t>(grid.x) * grid.y));
      for (Thread& t : b.threads) t.where.block = uint3{x, y, z};
      const std::string error = b.direct ? run_block_direct(b) : run_block(b);
      // Most kernels (grid-stride elementwise loops) never synchronise: after a first block that shows it,
      // the others run without the cost of a fiber per thread.
      if (k == 0 && !b.synchronised && !fibers_always()) b.direct = true;
      if (!error.empty()) {
        g_block = outer;
        set_launch_error(cudaErrorLaunchFailure, where + ": block (" + std::to_string(x) + ", " +
                                                     std::to_string(y) + ", " + std::to_string(z) +
                                                     "): " + error);
        return;
      }
    }
    g_block = outer;
  };
  const cudaError_t status = enqueue(stream, std::move(run));
  if (status != cudaSuccess) set_launch_error(status, where + ": the launch's stream cannot take work");
}

}  // namespace bsw::emu
