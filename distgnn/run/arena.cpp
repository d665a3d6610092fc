// A planned memory arena for torch's CPU allocations of a training epoch.
//
// An epoch of full-batch training allocates the same large blocks in the same order every
// time (activations, gradients, kernel outputs and workspaces).  The arena records the
// large blocks of one epoch (size, when allocated, when freed), plans them into one slab
// (each block an offset, blocks alive at the same time never overlapping; greedy by size,
// largest first, lowest offset that fits), touches the slab once, and from then on serves
// the k-th large block of an epoch from its planned offset.  An epoch served from the plan
// maps no memory: no page faults, no mmap/munmap system calls, and its peak is the slab.
//
// Only blocks allocated by the thread that began the epoch are planned (torch's autograd
// runs a CPU graph on that thread; pool threads' allocations come in no fixed order).  A
// block whose size differs from the plan's k-th, whose place is still held by a block that
// lived longer than planned, or that outlived the recorded epoch, comes from the allocator
// the arena replaced.  Every such miss is counted; an epoch with a miss is recorded again
// and planned anew.
//
// Built by distgnn/run/arena.py against the installed torch's headers; the functions at the
// end are its C interface (ctypes).
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kAlign = 64;  // torch's own CPU alignment

size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Block {        // one large allocation of the recorded epoch
  size_t bytes;
  uint64_t born, died;  // event clock; died == kAlive: outlived the epoch
  size_t offset;      // in the slab (planned blocks only)
  bool planned;
};
constexpr uint64_t kAlive = UINT64_MAX;

enum class Mode { Off, Record, Replay };

struct Context {      // where a block's memory came from (kept by its address)
  size_t index;       // the block's number in its epoch
  uint64_t epoch;     // the epoch that allocated it
  bool in_slab;
};

class PlannedArena final : public c10::Allocator {
 public:
  explicit PlannedArena(size_t min_bytes) : min_bytes_(min_bytes) {}

  c10::DataPtr allocate(size_t n) override {
    if (n < min_bytes_) return passthrough(n);
    std::lock_guard<std::mutex> guard(mutex_);
    if (mode_ == Mode::Off || std::this_thread::get_id() != owner_) return passthrough(n);
    size_t index = next_++;
    if (mode_ == Mode::Record) {
      trace_.push_back({n, clock_++, kAlive, 0, false});
      if (record_in_slab_) {
        std::vector<std::pair<size_t, size_t>> taken;
        for (const Live& l : live_) taken.emplace_back(l.offset, l.offset + l.bytes);
        size_t offset = lowest_gap(taken, n);
        if (offset + aligned(n) <= slab_bytes_) {
          live_.push_back({offset, aligned(n), index, epoch_});
          return wrap(slab_ + offset, index, true);
        }
      }
      return wrap(c10::alloc_cpu(n), index, false);
    }
    ++large_;
    index = resync(index, n);
    const std::vector<Block>& plan = plans_[kind_].blocks;
    if (index < plan.size() && plan[index].planned && plan[index].bytes == n &&
        free_in_slab(plan[index].offset, n)) {
      live_.push_back({plan[index].offset, aligned(n), index, epoch_});
      return wrap(slab_ + plan[index].offset, index, true);
    }
    if (!(index < plan.size() && !plan[index].planned && plan[index].bytes == n))
      ++misses_;  // a block the plan did not foresee
    return wrap(c10::alloc_cpu(n), index, false);
  }

  // Every DataPtr's context is its address (torch's raw_allocate, which oneDNN's bf16
  // kernels call, requires it), freed through this one deleter.
  c10::DeleterFnPtr raw_deleter() const override { return &PlannedArena::deleter; }

  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count);
  }

  // The caller's thread begins an epoch of a kind (training, evaluation: each has its
  // own plan, in the one slab): record it (no plan yet, or the last one missed) or serve
  // it from the plan.
  void begin_epoch(size_t kind) {
    std::lock_guard<std::mutex> guard(mutex_);
    owner_ = std::this_thread::get_id();
    kind_ = kind;
    if (plans_.size() <= kind) plans_.resize(kind + 1);
    ++epoch_;
    next_ = 0;
    misses_ = 0;
    large_ = 0;
    if (plans_[kind].blocks.empty() || plans_[kind].replan) {
      mode_ = Mode::Record;
      // A kind's first recording runs in the slab of the others where it fits: recorded
      // beside it, the evaluation's blocks would add to the slab's peak.  Not a second
      // recording: it follows a block that outlived its plan, and a block of the recorded
      // epoch that outlives it in the slab would be in the way of the next plan.
      record_in_slab_ = plans_[kind].blocks.empty();
      trace_.clear();
      clock_ = 0;
    } else {
      mode_ = Mode::Replay;
    }
  }

  // Ends the epoch; after a recorded one, plans the slab.  Returns the slab's bytes.
  size_t end_epoch() {
    std::lock_guard<std::mutex> guard(mutex_);
    if (mode_ == Mode::Record) plan();
    else plans_[kind_].replan = misses_ > 0;
    last_misses_ = misses_;
    last_large_ = mode_ == Mode::Record ? trace_.size() : large_;
    mode_ = Mode::Off;
    return slab_bytes_;
  }

  // Gives the slab back (now, or when its last live block is freed) and forgets the
  // plans: the end of a run.
  void release() {
    std::lock_guard<std::mutex> guard(mutex_);
    retire_slab();
    slab_bytes_ = 0;
    plans_.clear();
    mode_ = Mode::Off;
  }

  void stats(uint64_t* out) {
    std::lock_guard<std::mutex> guard(mutex_);
    size_t planned = 0, blocks = 0;
    if (kind_ < plans_.size()) {
      blocks = plans_[kind_].blocks.size();
      for (const Block& b : plans_[kind_].blocks) planned += b.planned;
    }
    out[0] = slab_bytes_;
    out[1] = blocks;
    out[2] = planned;
    out[3] = last_large_;
    out[4] = last_misses_;
    out[5] = plans_made_;
  }

  // A block of this arena, or one it passed through to c10::alloc_cpu, is freed.
  void freed(void* data) {
    Context ctx;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      auto found = blocks_.find(data);
      if (found == blocks_.end()) {
        ctx = {0, 0, false};  // passed through: not the arena's
      } else {
        ctx = found->second;
        blocks_.erase(found);
        if (mode_ == Mode::Record && ctx.epoch == epoch_ && ctx.index < trace_.size())
          trace_[ctx.index].died = clock_++;
        if (ctx.in_slab && !forget(live_, ctx) && forget(retired_live_, ctx) &&
            retired_live_.empty()) {
          for (char* s : retired_) c10::free_cpu(s);
          retired_.clear();
        }
      }
    }
    if (!ctx.in_slab) c10::free_cpu(data);
  }

 private:
  struct Live { size_t offset, bytes, index; uint64_t epoch; };

  static void deleter(void* data);

  // What torch's default CPU allocator does (c10::alloc_cpu), freed by c10::free_cpu
  // directly unless a raw deallocation sends it through deleter.
  static c10::DataPtr passthrough(size_t n) {
    void* data = c10::alloc_cpu(n);
    return c10::DataPtr(data, data, &c10::free_cpu, c10::Device(c10::DeviceType::CPU));
  }

  c10::DataPtr wrap(void* data, size_t index, bool in_slab) {
    blocks_[data] = Context{index, epoch_, in_slab};
    return c10::DataPtr(data, data, &PlannedArena::deleter,
                        c10::Device(c10::DeviceType::CPU));
  }

  // The plan's block for a request of n bytes: the next one if its size is n, else the
  // first later one of size n (blocks of the recorded epoch that this one does not
  // allocate, such as the kernels' trial of the first epoch, are passed over); the epoch
  // goes on counting from there.
  size_t resync(size_t index, size_t n) {
    const std::vector<Block>& plan = plans_[kind_].blocks;
    if (index >= plan.size() || plan[index].bytes == n) return index;
    for (size_t k = index + 1; k < plan.size(); ++k) {
      if (plan[k].bytes == n) {
        next_ = k + 1;
        return k;
      }
    }
    return index;
  }

  // The lowest offset where n bytes overlap none of the [begin, end) ranges taken.
  static size_t lowest_gap(std::vector<std::pair<size_t, size_t>>& taken, size_t n) {
    std::sort(taken.begin(), taken.end());
    size_t offset = 0;
    for (const auto& t : taken) {
      if (offset + aligned(n) <= t.first) break;
      offset = std::max(offset, t.second);
    }
    return offset;
  }

  bool free_in_slab(size_t offset, size_t n) const {
    size_t end = offset + aligned(n);
    for (const Live& l : live_)
      if (offset < l.offset + l.bytes && l.offset < end) return false;
    return true;
  }

  void plan() {
    // Blocks alive at the epoch's end are not planned: their place would be taken by the
    // next epoch's blocks while they still hold it.
    std::vector<size_t> order;
    for (size_t i = 0; i < trace_.size(); ++i)
      if (trace_[i].died != kAlive) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return trace_[a].bytes > trace_[b].bytes;
    });
    std::vector<size_t> placed;
    size_t top = 0;
    for (size_t i : order) {
      Block& b = trace_[i];
      std::vector<std::pair<size_t, size_t>> taken;  // by blocks alive at the same time
      for (size_t j : placed) {
        const Block& o = trace_[j];
        if (b.born < o.died && o.born < b.died)
          taken.emplace_back(o.offset, o.offset + aligned(o.bytes));
      }
      size_t offset = lowest_gap(taken, b.bytes);
      b.offset = offset;
      b.planned = true;
      placed.push_back(i);
      top = std::max(top, offset + aligned(b.bytes));
    }
    plans_[kind_] = {trace_, false};
    ++plans_made_;
    if (top > slab_bytes_) {  // the slab serves every kind's plan, one at a time
      retire_slab();
      slab_ = top ? static_cast<char*>(c10::alloc_cpu(top)) : nullptr;
      if (slab_) std::memset(slab_, 0, top);  // fault it in now, not in the epochs
      slab_bytes_ = top;
    }
  }

  // A slab replaced by a new plan is freed once none of its blocks is alive.
  void retire_slab() {
    if (!slab_) return;
    if (live_.empty()) {
      c10::free_cpu(slab_);
    } else {
      retired_.push_back(slab_);  // its live blocks must not block the new slab
      retired_live_.insert(retired_live_.end(), live_.begin(), live_.end());
      live_.clear();
    }
    slab_ = nullptr;
  }

  // Removes ctx's block from blocks; whether it was there.
  static bool forget(std::vector<Live>& blocks, const Context& ctx) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (blocks[i].index == ctx.index && blocks[i].epoch == ctx.epoch) {
        blocks[i] = blocks.back();
        blocks.pop_back();
        return true;
      }
    }
    return false;
  }

  const size_t min_bytes_;
  std::mutex mutex_;
  Mode mode_ = Mode::Off;
  std::thread::id owner_;
  uint64_t epoch_ = 0, clock_ = 0;
  size_t next_ = 0, misses_ = 0, large_ = 0, last_misses_ = 0, last_large_ = 0;
  size_t plans_made_ = 0, kind_ = 0;
  bool record_in_slab_ = false;
  struct Plan {
    std::vector<Block> blocks;
    bool replan;  // the last epoch served from it missed
  };
  std::vector<Plan> plans_;  // by kind
  std::unordered_map<void*, Context> blocks_;  // the arena's live blocks by address
  std::vector<Block> trace_;
  std::vector<Live> live_, retired_live_;
  std::vector<char*> retired_;
  char* slab_ = nullptr;
  size_t slab_bytes_ = 0;
};

PlannedArena* g_arena = nullptr;

void PlannedArena::deleter(void* data) { g_arena->freed(data); }

}  // namespace

extern "C" {

// Makes the arena torch's CPU allocator (once per process); blocks below min_bytes are
// never planned.  Returns 0.
int distgnn_arena_install(uint64_t min_bytes) {
  if (!g_arena) {
    g_arena = new PlannedArena(min_bytes);  // lives as long as the process: tensors outlive
    c10::SetCPUAllocator(g_arena, /*priority=*/1);  // any Python object that could own it
  }
  return 0;
}

void distgnn_arena_begin_epoch(uint64_t kind) { g_arena->begin_epoch(kind); }

uint64_t distgnn_arena_end_epoch() { return g_arena->end_epoch(); }

void distgnn_arena_release() { g_arena->release(); }

// out[6]: slab bytes, blocks in the last epoch's plan, of them planned, large blocks of the last epoch,
// of them missed, plans made.
void distgnn_arena_stats(uint64_t* out) { g_arena->stats(out); }

}
