// fiber.h — cooperative fibers for the CUDA emulator: every emulated GPU thread of a block runs on its own
// small stack and gives control back to the block scheduler (grid.h) at each barrier or warp intrinsic.
// On x86-64 the switch is a dozen instructions (callee-saved registers, MXCSR and the x87 control word:
// exactly what the SysV ABI says survives a call); elsewhere it falls back to POSIX ucontext.
// Stacks are mmap'ed with a guard page below them and reused across blocks and launches.
// (EMBSHARD_EMU_UCONTEXT forces the ucontext path on x86-64 too.) Under AddressSanitizer every switch is
// announced to it (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber), so a sanitized build
// of the emulator checks the kernels' memory accesses on the fibers' stacks too.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "asan.h"
#if defined(EMBSHARD_EMU_ASAN)
#include <pthread.h>
#endif

#if defined(__x86_64__) && !defined(EMBSHARD_EMU_UCONTEXT)
#define EMBSHARD_EMU_X86_SWITCH 1
#else
#include <ucontext.h>
#endif

#if defined(EMBSHARD_EMU_X86_SWITCH)
// void embshard_emu_switch(void** saveSp, void* loadSp): saves this context's registers on its stack and
// its stack pointer in *saveSp, then resumes the context whose stack pointer is loadSp.
// embshard_emu_trampoline: the first "return address" of a new fiber: calls %rbx(%r12) (never returns).
// Weak + hidden: every translation unit that includes this header emits the same two functions.
extern "C" void embshard_emu_switch(void** saveSp, void* loadSp);
extern "C" void embshard_emu_trampoline();
asm(R"(
  .text
  .weak embshard_emu_switch
  .hidden embshard_emu_switch
  .type embshard_emu_switch, @function
embshard_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size embshard_emu_switch, .-embshard_emu_switch
  .weak embshard_emu_trampoline
  .hidden embshard_emu_trampoline
  .type embshard_emu_trampoline, @function
embshard_emu_trampoline:
  movq %r12, %rdi
  callq *%rbx
  ud2
  .size embshard_emu_trampoline, .-embshard_emu_trampoline
)");
#endif

namespace embshard::emu {

constexpr size_t kStackBytes = 256 << 10;  // per emulated thread (kernels keep small frames)
constexpr size_t kGuardBytes = 4096;

// One mmap'ed stack with a PROT_NONE guard page below it (an overflow faults instead of corrupting).
class Stack {
 public:
  Stack() {
    void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "CUDA emulator: cannot map a fiber stack\n");
      std::abort();
    }
    (void)mprotect(p, kGuardBytes, PROT_NONE);
    base_ = static_cast<uint8_t*>(p);
  }
  ~Stack() { munmap(base_, kStackBytes + kGuardBytes); }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  uint8_t* bottom() const { return base_ + kGuardBytes; }
  uint8_t* top() const { return base_ + kGuardBytes + kStackBytes; }

 private:
  uint8_t* base_;
};

// An execution context: the scheduler's (the launching host thread) or a fiber's.
using FiberEntry = void (*)(void*);

struct Context {
#if defined(EMBSHARD_EMU_X86_SWITCH)
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
#if defined(EMBSHARD_EMU_ASAN)
  // the stack AddressSanitizer is told about when this context is resumed (the host thread's own stack
  // for the scheduler's, read when first needed), its fake stack, and a new fiber's real entry
  const void* stackBottom = nullptr;
  size_t stackSize = 0;
  void* fakeStack = nullptr;
  FiberEntry entry = nullptr;
  void* arg = nullptr;
#endif
};

#if defined(EMBSHARD_EMU_ASAN)
// A new fiber's first frame under AddressSanitizer: completes the switch that started it, then runs it.
inline void asan_fiber_start(void* p) {
  Context& c = *static_cast<Context*>(p);
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
  c.entry(c.arg);
}

// The bounds of the calling host thread's own stack (whatever stack it runs on now).
inline void thread_stack(const void** bottom, size_t* size) {
  pthread_attr_t a;
  void* addr = nullptr;
  size_t bytes = 0;
  if (pthread_getattr_np(pthread_self(), &a) == 0) {
    (void)pthread_attr_getstack(&a, &addr, &bytes);
    pthread_attr_destroy(&a);
  }
  *bottom = addr;
  *size = bytes;
}
#endif

#if !defined(EMBSHARD_EMU_X86_SWITCH)
inline void ucontext_entry(unsigned flo, unsigned fhi, unsigned alo, unsigned ahi) {
  const auto f = reinterpret_cast<FiberEntry>((static_cast<uintptr_t>(fhi) << 32) | flo);
  f(reinterpret_cast<void*>((static_cast<uintptr_t>(ahi) << 32) | alo));
}
#endif

// Prepares `c` to run entry(arg) on `stack` when first switched to. entry must never return.
inline void make_context(Context& c, Stack& stack, FiberEntry entry, void* arg) {
#if defined(EMBSHARD_EMU_ASAN)
  // a reused stack still carries the redzones of the frames its last fiber never returned from
  __asan_unpoison_memory_region(stack.bottom(), kStackBytes);
  c.stackBottom = stack.bottom();
  c.stackSize = kStackBytes;
  c.entry = entry;
  c.arg = arg;
  entry = &asan_fiber_start;
  arg = &c;
#endif
#if defined(EMBSHARD_EMU_X86_SWITCH)
  uint64_t* top = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(stack.top()) & ~uintptr_t(15));
  uint64_t* ret = top - 3;  // after `ret` pops it, %rsp is 16-aligned for the trampoline's call
  uint64_t* sp = ret - 8;   // [fpcw, mxcsr, r15, r14, r13, r12, rbx, rbp] below the return address
  uint32_t mxcsr;
  uint16_t fpcw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  sp[0] = fpcw;
  sp[1] = mxcsr;
  sp[2] = sp[3] = sp[4] = 0;                       // r15, r14, r13
  sp[5] = reinterpret_cast<uint64_t>(arg);         // r12
  sp[6] = reinterpret_cast<uint64_t>(entry);       // rbx
  sp[7] = 0;                                       // rbp
  ret[0] = reinterpret_cast<uint64_t>(&embshard_emu_trampoline);
  c.sp = sp;
#else
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack.bottom();
  c.uc.uc_stack.ss_size = kStackBytes;
  c.uc.uc_link = nullptr;
  // makecontext passes int arguments: split the pointer in two halves
  const uintptr_t a = reinterpret_cast<uintptr_t>(arg), f = reinterpret_cast<uintptr_t>(entry);
  makecontext(&c.uc, reinterpret_cast<void (*)()>(&ucontext_entry), 4, static_cast<unsigned>(f), static_cast<unsigned>(f >> 32),
              static_cast<unsigned>(a), static_cast<unsigned>(a >> 32));
#endif
}

// Saves the running context into `from` and resumes `to`.
inline void switch_context(Context& from, Context& to) {
#if defined(EMBSHARD_EMU_ASAN)
  if (to.stackBottom == nullptr) thread_stack(&to.stackBottom, &to.stackSize);  // the scheduler's
  __sanitizer_start_switch_fiber(&from.fakeStack, to.stackBottom, to.stackSize);
#endif
#if defined(EMBSHARD_EMU_X86_SWITCH)
  embshard_emu_switch(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
#if defined(EMBSHARD_EMU_ASAN)
  __sanitizer_finish_switch_fiber(from.fakeStack, nullptr, nullptr);
#endif
}

// Stacks reused by the fibers of every block run on this host thread.
class StackPool {
 public:
  Stack* take() {
    if (free_.empty()) {
      all_.push_back(new Stack());
      return all_.back();
    }
    Stack* s = free_.back();
    free_.pop_back();
    return s;
  }
  void give(Stack* s) { free_.push_back(s); }
  ~StackPool() {
    for (Stack* s : all_) delete s;
  }

 private:
  std::vector<Stack*> all_, free_;
};

}  // namespace embshard::emu
