// The neuron device in C++: a PrivateUse1 backend whose tensors are real TensorImpls over host
// memory. Every aten op without a kernel of its own runs CPU's kernel on zero-copy CPU aliases of
// its tensors (one boxed fallback), so results are CPU's bits and an op costs a few microseconds
// above CPU, where a Python tensor subclass costs about ten (docs/torch.md, "Speed").
//
// What lives here: the allocator (host memory tagged neuron, counted per device), the fallback,
// empty/copy kernels, the device guard (current device, streams and events that are done at once)
// and the hooks (generators). Everything trnsim decides about ops stays in Python.

#include <torch/extension.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <ATen/EmptyTensor.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace {

constexpr auto kNeuron = c10::DeviceType::PrivateUse1;
constexpr int kMaxDevices = 64;

// ---- device state -------------------------------------------------------------------------------

std::atomic<int> device_count{1};
thread_local c10::DeviceIndex current_device = 0;

struct Counters {
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
};
std::array<Counters, kMaxDevices> counters;

void count(int device, int64_t bytes) {
  auto& c = counters[device];
  int64_t now = c.allocated.fetch_add(bytes) + bytes;
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

// Calls one of the Python handlers set at start-up (trnsim.torch.device), which raise trnsim's
// errors; a handler not set is skipped, and the caller's own check follows.
template <typename... Args>
void call_handler(PyObject* handler, Args&&... args) {
  if (handler != nullptr) {
    py::gil_scoped_acquire gil;
    py::reinterpret_borrow<py::object>(handler)(std::forward<Args>(args)...);
  }
}

// Raises trnsim's UnsupportedError for a device the node does not have.
PyObject* index_handler = nullptr;

c10::DeviceIndex checked_index(c10::DeviceIndex index) {
  if (index < 0 || index >= device_count.load()) {
    call_handler(index_handler, static_cast<int>(index));
  }
  TORCH_CHECK(index >= 0 && index < device_count.load(), "neuron:", static_cast<int>(index),
              " does not exist: the emulated node has ", device_count.load(), " neuron devices");
  return index;
}

// ---- memory -------------------------------------------------------------------------------------

// Host memory counted against one device. `owner` keeps alive memory that another storage
// allocated (a CPU kernel's result adopted by the device); otherwise `own` was allocated here.
struct Block {
  c10::DataPtr owner;
  void* own = nullptr;
  int64_t bytes = 0;
  int device = 0;
};

void release(void* context) {
  auto* block = static_cast<Block*>(context);
  count(block->device, -block->bytes);
  if (block->own != nullptr) {
    c10::free_cpu(block->own);
  }
  delete block;
}

c10::DataPtr counted(void* data, Block* block) {
  count(block->device, block->bytes);
  return {data, block, &release, c10::Device(kNeuron, static_cast<c10::DeviceIndex>(block->device))};
}

struct HostAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t bytes) override {
    void* data = bytes ? c10::alloc_cpu(bytes) : nullptr;
    return counted(data, new Block{{}, data, static_cast<int64_t>(bytes), current_device});
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dst, const void* src, std::size_t count) const override {
    std::memcpy(dst, src, count);
  }
};

HostAllocator allocator;

// Pinned memory (`pin_memory()`, DataLoader's default once neuron is the accelerator): the device
// reads host memory as it is, so it is plain host memory, remembered so that `is_pinned()` answers
// as on CUDA (DDP checks it).
std::mutex pinned_mutex;
std::unordered_set<const void*> pinned;

void release_pinned(void* data) {
  {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    pinned.erase(data);
  }
  c10::free_cpu(data);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t bytes) override {
    void* data = bytes ? c10::alloc_cpu(bytes) : nullptr;
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(pinned_mutex);
      pinned.insert(data);
    }
    return {data, data, &release_pinned, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release_pinned; }
  void copy_data(void* dst, const void* src, std::size_t count) const override {
    std::memcpy(dst, src, count);
  }
};

PinnedAllocator pinned_allocator;

bool is_pinned(const void* data) {
  std::lock_guard<std::mutex> lock(pinned_mutex);
  return pinned.count(data) > 0;
}

// A neuron storage over the memory of `cpu`, a storage a CPU kernel made (no copy).
c10::Storage adopt(const c10::Storage& cpu, c10::DeviceIndex device) {
  auto* block = new Block{{}, nullptr, static_cast<int64_t>(cpu.nbytes()), device};
  // The block holds a reference to the CPU storage through a DataPtr that owns nothing else.
  auto* keep = new c10::Storage(cpu);
  block->owner = c10::DataPtr(cpu.mutable_data(), keep,
                              [](void* p) { delete static_cast<c10::Storage*>(p); }, c10::Device(c10::kCPU));
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), cpu.nbytes(), counted(cpu.mutable_data(), block), &allocator,
      /*resizable=*/true));
}

// A CPU storage over a neuron storage's memory, for CPU kernels (no copy). It keeps the neuron
// storage alive; a kernel that grows it reallocates with CPU's allocator (see `write_back`).
c10::Storage cpu_alias(const c10::Storage& neuron) {
  auto* keep = new c10::Storage(neuron);
  c10::DataPtr data(neuron.mutable_data(), keep, [](void* p) { delete static_cast<c10::Storage*>(p); },
                    c10::Device(c10::kCPU));
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), neuron.nbytes(), std::move(data), c10::GetCPUAllocator(),
      /*resizable=*/true));
}

at::Tensor with_storage(c10::Storage storage, const at::Tensor& like, c10::DispatchKey key) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                       like.dtype());
  auto* impl = out.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  impl->_set_conj(like.is_conj());  // a lazy conjugate or negation travels with a view
  impl->_set_neg(like.is_neg());
  return out;
}

bool is_neuron(const at::Tensor& t) { return t.defined() && t.device().type() == kNeuron; }

// Neuron's switch for stochastic rounding of fp32 -> bf16 writes. While the variable is set, such a
// write asks Python (trnsim.torch.precision, set_rounding_handler) for the rounded values, or None
// to round to nearest even as CPU does; unset, nothing leaves C++.
PyObject* rounding_handler = nullptr;

std::optional<at::Tensor> rounded(const at::Tensor& src, at::ScalarType dst) {
  if (src.scalar_type() != at::kFloat || dst != at::kBFloat16 || rounding_handler == nullptr ||
      std::getenv("NEURON_RT_STOCHASTIC_ROUNDING_EN") == nullptr) {
    return std::nullopt;
  }
  py::gil_scoped_acquire gil;
  auto values = py::reinterpret_borrow<py::object>(rounding_handler)(src);
  return values.is_none() ? std::nullopt : std::make_optional(values.cast<at::Tensor>());
}

at::Tensor cast(const at::Tensor& t, at::ScalarType dtype) {
  auto values = rounded(t, dtype);
  return values.has_value() ? *values : t.to(dtype);
}

// A neuron generator draws from a CPU generator: the default one per device is CPU's default
// (random ops give CPU's numbers), `torch.Generator(device="neuron")` gets a new one.
struct DeviceGenerator final : c10::GeneratorImpl {
  at::Generator cpu;
  DeviceGenerator(c10::DeviceIndex index, at::Generator cpu)
      : c10::GeneratorImpl(c10::Device(kNeuron, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        cpu(std::move(cpu)) {}
  void set_current_seed(uint64_t seed) override { cpu.set_current_seed(seed); }
  void set_offset(uint64_t offset) override { cpu.set_offset(offset); }
  uint64_t get_offset() const override { return cpu.get_offset(); }
  uint64_t current_seed() const override { return cpu.current_seed(); }
  uint64_t seed() override { return cpu.seed(); }
  void set_state(const c10::TensorImpl& state) override { cpu.unsafeGetGeneratorImpl()->set_state(state); }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return cpu.unsafeGetGeneratorImpl()->get_state();
  }
  DeviceGenerator* clone_impl() const override { return new DeviceGenerator(device_.index(), cpu.clone()); }
};

// ---- the fallback -------------------------------------------------------------------------------

// One op's CPU view of its neuron arguments, and the way back for its results.
struct Aliases {
  std::vector<std::pair<at::Tensor, at::Tensor>> tensors;            // (neuron, cpu alias)
  std::unordered_map<c10::StorageImpl*, c10::Storage> storages;      // cpu alias storage -> neuron
  std::vector<c10::StorageImpl*> cpu_inputs;                         // storages of plain CPU tensors
  c10::DeviceIndex device = -1;                                      // the first neuron input's

  at::Tensor stray;  // the first CPU tensor of more than 0 dims among the arguments
  bool stray_in_list = false;
  at::Tensor elsewhere;  // the first neuron tensor on another device than the first one's

  at::Tensor to_cpu(const at::Tensor& t, bool in_list = false) {
    if (!is_neuron(t)) {
      if (t.defined() && t.has_storage()) {
        cpu_inputs.push_back(t.storage().unsafeGetStorageImpl());
        if (t.dim() > 0 && !stray.defined()) {
          stray = t;
          stray_in_list = in_list;
        }
      }
      return t;
    }
    if (device < 0) {
      device = t.device().index();
    } else if (t.device().index() != device && !elsewhere.defined()) {
      elsewhere = t;
    }
    for (auto& [neuron, cpu] : tensors) {
      if (neuron.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
        return cpu;
      }
    }
    auto cpu = with_storage(storage_to_cpu(t.storage()), t, c10::DispatchKey::CPU);
    tensors.emplace_back(t, cpu);
    return cpu;
  }

  // One CPU alias per neuron storage, so that arguments sharing memory still share it.
  c10::Storage storage_to_cpu(const c10::Storage& neuron) {
    for (auto& [alias, owner] : storages) {
      if (owner.unsafeGetStorageImpl() == neuron.unsafeGetStorageImpl()) {
        return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(alias));
      }
    }
    auto storage = cpu_alias(neuron);
    storages.emplace(storage.unsafeGetStorageImpl(), neuron);
    return storage;
  }

  // After the kernel: carry a growth or a new layout of each argument's alias back to the tensor.
  void write_back() {
    for (auto& [neuron, cpu] : tensors) {
      auto* alias = cpu.storage().unsafeGetStorageImpl();
      auto found = storages.find(alias);
      if (found == storages.end()) {  // the kernel gave the alias a storage of its own (set_)
        neuron.unsafeGetTensorImpl()->set_storage_keep_dtype(adopt(cpu.storage(), neuron.device().index()));
      } else if (neuron.storage().unsafeGetStorageImpl() != found->second.unsafeGetStorageImpl()) {
        neuron.unsafeGetTensorImpl()->set_storage_keep_dtype(found->second);  // set_ to another argument
      } else if (alias->data() != found->second.data() || alias->nbytes() != found->second.nbytes()) {
        // The kernel grew the storage (resize_, out= of a larger shape): the neuron storage
        // takes the new memory, so every view of it sees what CPU's views would.
        auto grown = adopt(cpu.storage(), neuron.device().index());
        found->second.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(grown.mutable_data_ptr()));
        found->second.unsafeGetStorageImpl()->set_nbytes(alias->nbytes());
      }
      auto* impl = neuron.unsafeGetTensorImpl();
      if (neuron.sizes() != cpu.sizes() || neuron.strides() != cpu.strides() ||
          neuron.storage_offset() != cpu.storage_offset()) {
        impl->set_sizes_and_strides(cpu.sizes(), cpu.strides(), cpu.storage_offset());
      }
    }
  }

  at::Tensor to_neuron(const at::Tensor& cpu, std::unordered_map<c10::StorageImpl*, c10::Storage>& fresh) {
    if (!cpu.defined() || cpu.device().type() != c10::kCPU) {
      return cpu;
    }
    for (auto& [neuron, alias] : tensors) {
      if (alias.unsafeGetTensorImpl() == cpu.unsafeGetTensorImpl()) {
        return neuron;  // an in-place op returns its argument
      }
    }
    auto* storage = cpu.storage().unsafeGetStorageImpl();
    auto found = storages.find(storage);
    if (found != storages.end()) {
      return with_storage(found->second, cpu, c10::DispatchKey::PrivateUse1);  // a view of an argument
    }
    auto index = device >= 0 ? device : current_device;
    if (std::find(cpu_inputs.begin(), cpu_inputs.end(), storage) != cpu_inputs.end()) {
      // A CPU argument handed back as it is: the device gets its own copy, not shared memory.
      auto copy = cpu.clone();
      return with_storage(adopt(copy.storage(), index), copy, c10::DispatchKey::PrivateUse1);
    }
    auto made = fresh.find(storage);
    if (made == fresh.end()) {
      made = fresh.emplace(storage, adopt(cpu.storage(), index)).first;
    }
    return with_storage(made->second, cpu, c10::DispatchKey::PrivateUse1);
  }
};

// Raises trnsim's DeviceMismatchError.
PyObject* mismatch_handler = nullptr;

void refuse_mismatch(const c10::OperatorHandle& op, const at::Tensor& tensor, c10::DeviceIndex device) {
  call_handler(mismatch_handler, op.schema().name(), op.schema().overload_name(), tensor,
               static_cast<int>(device));
  TORCH_CHECK(false, "a neuron op got a tensor of another device, of shape ", tensor.sizes());  // no handler
}

// As on CUDA, a neuron op takes tensors of one device, and a CPU tensor of more than 0 dims only
// where CUDA takes one: index tensors of the indexing ops, and the lengths of a packed sequence.
// copy_ is how data moves between devices.
void check_devices(const c10::OperatorHandle& op, const Aliases& aliases) {
  if (aliases.elsewhere.defined() && op.schema().name() != "aten::copy_") {
    refuse_mismatch(op, aliases.elsewhere, aliases.device);
  }
  if (!aliases.stray.defined() || aliases.device < 0) {
    return;
  }
  const auto& name = op.schema().name();
  const bool index = name == "aten::index" || name == "aten::index_put" || name == "aten::index_put_" ||
                     name == "aten::_index_put_impl_" || name == "aten::_unsafe_index" ||
                     name == "aten::_unsafe_index_put";
  const bool lengths = (name == "aten::_pack_padded_sequence" ||
                        name == "aten::_pack_padded_sequence_backward") &&
                       aliases.stray.dim() == 1 && aliases.stray.scalar_type() == at::kLong;
  if (!(index && aliases.stray_in_list) && !lengths) {
    refuse_mismatch(op, aliases.stray, aliases.device);
  }
}

// Raises trnsim's UnsupportedError for an op whose CPU kernel made a sparse (or other non-strided)
// tensor: the device has strided tensors only.
PyObject* layout_handler = nullptr;

void refuse_layout(const c10::OperatorHandle& op, const at::Tensor& made) {
  std::ostringstream layout;
  layout << made.layout();
  call_handler(layout_handler, op.schema().name(), op.schema().overload_name(), layout.str());
  TORCH_CHECK(false, "the neuron device has strided tensors only");  // no handler set
}

// The aten ops trnsim's op table implements (trnsim.torch.ops.FAMILIES); any other op is reported
// to Python, which counts it, warns once or refuses it in strict mode (trnsim.torch.fallback).
std::unordered_set<std::string> implemented;
PyObject* fallback_handler = nullptr;

void check_implemented(const c10::OperatorHandle& op) {
  const auto& name = op.schema().name();
  if (name.rfind("aten::", 0) == 0 && implemented.count(name) == 0) {
    call_handler(fallback_handler, name, op.schema().overload_name());
  }
}

// Matmuls and convolutions whose operands are all bf16 (or all fp16) multiply and accumulate in
// fp32 and round once, as TensorE does into PSUM (trnsim.torch.ops.FP32_ACCUMULATE).
std::unordered_set<std::string> accumulating;

std::optional<at::ScalarType> low_precision(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                                            size_t first) {
  if (accumulating.count(op.schema().name()) == 0 || op.schema().is_mutable()) {
    return std::nullopt;
  }
  std::optional<at::ScalarType> found;
  for (size_t i = first; i < stack.size(); ++i) {
    if (stack[i].isTensor() && stack[i].toTensor().defined()) {
      auto dtype = stack[i].toTensor().scalar_type();
      if (found.has_value() && *found != dtype) {
        return std::nullopt;  // mixed dtypes: CPU's kernel refuses them with its own error
      }
      found = dtype;
    }
  }
  return found == at::kBFloat16 || found == at::kHalf ? found : std::nullopt;
}

// Replaces each tensor held by `value` (a tensor, a list of them, of optional ones, or a list of
// tensor lists) by `change(tensor, in_list)`. False when `value` holds no tensors.
template <typename Change>
bool change_tensors(c10::IValue& value, Change change) {
  if (value.isTensor()) {
    value = change(value.toTensor(), false);
  } else if (value.isTensorList()) {
    auto list = value.toTensorList();
    for (size_t j = 0; j < list.size(); ++j) {
      list[j] = change(list[j], true);
    }
  } else if (value.isOptionalTensorList()) {
    auto list = value.toOptionalTensorList();
    for (size_t j = 0; j < list.size(); ++j) {
      std::optional<at::Tensor> item = list[j];
      if (item.has_value()) {
        list[j] = change(*item, true);
      }
    }
  } else if (value.isList()) {  // lists of tensor lists: allgather's outputs
    for (auto item : value.toList()) {
      if (item.get().isTensorList()) {
        c10::IValue inner = item.get();
        change_tensors(inner, change);
      }
    }
  } else {
    return false;
  }
  return true;
}

c10::DeviceIndex device_argument(const c10::IValue& value) {
  return value.isDevice() && value.toDevice().type() == kNeuron ? value.toDevice().index() : -1;
}

// While a trnsim.torch.profile block is open, every op run here is reported to Python (from any
// thread: backward runs on autograd's), which records it by name and argument shapes.
std::atomic<bool> recording{false};
PyObject* recorder = nullptr;

void record(const c10::OperatorHandle& op, const std::vector<c10::IValue>& inputs,
            const torch::jit::Stack& stack, size_t returns) {
  py::gil_scoped_acquire gil;
  py::tuple args(inputs.size()), outputs(returns);
  for (size_t i = 0; i < inputs.size(); ++i) {
    args[i] = torch::jit::toPyObject(inputs[i]);
  }
  for (size_t i = 0; i < returns; ++i) {
    outputs[i] = torch::jit::toPyObject(stack[stack.size() - returns + i]);
  }
  py::reinterpret_borrow<py::object>(recorder)(op.schema().name(), op.schema().overload_name(), args,
                                                outputs);
}

// Runs `op` with CPU's kernel on aliases of its neuron tensors; results come back as neuron tensors.
void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto arguments = op.schema().arguments().size();
  const auto first = stack->size() - arguments;
  const bool recorded = recording.load(std::memory_order_relaxed) && recorder != nullptr;
  std::vector<c10::IValue> inputs;
  if (recorded) {
    inputs.assign(stack->begin() + first, stack->end());
  }
  Aliases aliases;
  c10::DeviceIndex asked = -1;
  auto to_cpu = [&](const at::Tensor& t, bool in_list) { return aliases.to_cpu(t, in_list); };
  for (size_t i = first; i < stack->size(); ++i) {
    auto& value = (*stack)[i];
    if (change_tensors(value, to_cpu)) {
      continue;
    } else if (value.isStorage() && value.toStorage().device_type() == kNeuron) {
      value = c10::IValue(aliases.storage_to_cpu(value.toStorage()));  // set_(storage, ...)
    } else if (auto index = device_argument(value); index >= 0) {
      asked = checked_index(index);
      value = c10::IValue(c10::Device(c10::kCPU));
    } else if (value.isGenerator()) {
      auto generator = value.toGenerator();
      if (generator.device().type() == kNeuron) {
        value = c10::IValue(generator.get<DeviceGenerator>()->cpu);
      }
    }
  }
  check_devices(op, aliases);
  check_implemented(op);
  if (asked >= 0 && aliases.device < 0) {
    aliases.device = asked;
  }
  const auto low = low_precision(op, *stack, first);
  if (low.has_value()) {
    for (size_t i = first; i < stack->size(); ++i) {
      if ((*stack)[i].isTensor() && (*stack)[i].toTensor().defined()) {
        (*stack)[i] = (*stack)[i].toTensor().to(at::kFloat);
      }
    }
  }
  if (op.schema().name() == "aten::copy_") {  // copy_(self, src): a cast into self rounds as the engines do
    auto& src = (*stack)[first + 1];
    if (auto values = rounded(src.toTensor(), (*stack)[first].toTensor().scalar_type())) {
      src = *values;
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  if (low.has_value()) {
    for (size_t i = stack->size() - op.schema().returns().size(); i < stack->size(); ++i) {
      if ((*stack)[i].isTensor() && (*stack)[i].toTensor().scalar_type() == at::kFloat) {
        (*stack)[i] = cast((*stack)[i].toTensor(), *low);
      }
    }
  }
  aliases.write_back();
  std::unordered_map<c10::StorageImpl*, c10::Storage> fresh;
  const auto returns = op.schema().returns().size();
  for (size_t i = stack->size() - returns; i < stack->size(); ++i) {
    change_tensors((*stack)[i], [&](const at::Tensor& t, bool) {
      if (t.defined() && t.layout() != at::kStrided) {
        refuse_layout(op, t);
      }
      return aliases.to_neuron(t, fresh);
    });
  }
  if (recorded) {
    record(op, inputs, *stack, returns);
  }
}

// Runs a composite `op` on the neuron tensors themselves (CPU's slot holds the composite kernel),
// so that the profiler sees an op that would otherwise reach no device kernel.
void run_composite(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const bool recorded = recording.load(std::memory_order_relaxed) && recorder != nullptr;
  std::vector<c10::IValue> inputs;
  if (recorded) {
    inputs.assign(stack->end() - op.schema().arguments().size(), stack->end());
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  if (recorded) {
    record(op, inputs, *stack, op.schema().returns().size());
  }
}

// ---- kernels of its own -------------------------------------------------------------------------

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout>, std::optional<at::Device> device,
                               std::optional<bool>, std::optional<at::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(device.value_or(c10::Device(kNeuron, current_device)));
  return at::detail::empty_generic(size, &allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout>, std::optional<at::Device> device, std::optional<bool>) {
  c10::DeviceGuard guard(device.value_or(c10::Device(kNeuron, current_device)));
  return at::detail::empty_strided_generic(size, stride, &allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// Forward-mode AD stands a data-less ZeroTensor in for a missing tangent; CPU kernels on an alias
// of it would read memory that is not there, so the device makes the zeros it stands for.
at::Tensor zeros_for_zero_tensor(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                 std::optional<at::Layout> layout, std::optional<at::Device> device,
                                 std::optional<bool> pin_memory) {
  return empty_memory_format(size, dtype, layout, device, pin_memory, std::nullopt).zero_();
}

at::Tensor as_cpu(const at::Tensor& t) {
  return is_neuron(t) ? with_storage(cpu_alias(t.storage()), t, c10::DispatchKey::CPU) : t;
}

// `_copy_from(src, dst)`: every copy that involves the device (to, from and within it).
at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool /*non_blocking*/) {
  auto values = as_cpu(src);
  as_cpu(dst).copy_(rounded(values, dst.scalar_type()).value_or(values));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& src, const at::Tensor& dst) {
  at::native::resize_(dst, src.sizes());
  return copy_from(src, dst, false);
}

// Module.to moves a parameter in place (`param.data = moved`) only when this says yes; otherwise it
// makes new Parameters, and tied weights (a GPT's embedding and head) come apart. Host-memory
// tensors of both devices can take each other's place, as CPU and CUDA tensors can.
bool compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) { return t.layout() == at::kStrided && (t.is_cpu() || is_neuron(t)); };
  return (dense(self) && dense(from)) ||
         self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

// ---- guard and hooks ----------------------------------------------------------------------------

struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNeuron; }
  c10::Device exchangeDevice(c10::Device device) const override {
    auto old = getDevice();
    setDevice(device);
    return old;
  }
  c10::Device getDevice() const override { return {kNeuron, current_device}; }
  void setDevice(c10::Device device) const override { current_device = checked_index(device.index()); }
  void uncheckedSetDevice(c10::Device device) const noexcept override { current_device = device.index(); }
  c10::Stream getStream(c10::Device device) const override {
    auto index = device.has_index() ? device.index() : current_device;
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kNeuron, index));
  }
  c10::Stream exchangeStream(c10::Stream stream) const override { return getStream(stream.device()); }
  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override { return getStream(device); }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*high_priority*/) const override {
    return getStream(device);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count.load());
  }
  // Every op has finished when it returns: events are recorded done, nothing waits.
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, Guard);

at::Generator new_generator(c10::DeviceIndex index) {
  return at::make_generator<DeviceGenerator>(index, at::detail::createCPUGenerator());
}

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    static const auto defaults = [] {
      std::array<at::Generator, kMaxDevices> made;
      for (int i = 0; i < kMaxDevices; ++i) {
        made[i] = at::make_generator<DeviceGenerator>(i, at::detail::getDefaultCPUGenerator());
      }
      return made;
    }();
    return defaults[checked_index(index < 0 ? current_device : index)];
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return new_generator(index < 0 ? current_device : index);
  }
  at::Device getDeviceFromPtr(void*) const override { return {kNeuron, current_device}; }
  at::Allocator* getPinnedMemoryAllocator() const override { return &pinned_allocator; }
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t bytes) const override {
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), bytes);
  }
};

Hooks hooks;

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_cpu>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_has_compatible_shallow_copy_type", compatible_shallow_copy_type);
  m.impl("_efficientzerotensor", zeros_for_zero_tensor);
  // CPU's own code for views and resize_: it works on any host-memory tensor (storage resizes go
  // through the storage's allocator, this device's).
  m.impl("view", at::native::view);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("resize_", at::native::resize_);
}

// `_copy_from` takes a lazily conjugated or negated source as it is (its CPU alias keeps the bit,
// and CPU's copy_ resolves it). Materialising it first would copy through `_copy_from` again.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}

// Autocast leaves every op alone unless trnsim.torch.autocast gives it a casting kernel.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

// Kernels registered from Python at start-up (trnsim.torch.device): ops that must run
// whole with CPU's kernel.
std::vector<std::unique_ptr<torch::Library>> libraries;

// Drops PyTorch's warning that a kernel replaces another (c10d's own PrivateUse1 collectives).
struct Silent final : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

template <void (*kernel)(const c10::OperatorHandle&, torch::jit::Stack*)>
void register_for(const std::string& ns, const std::vector<std::string>& names) {
  Silent silent;
  c10::WarningUtils::WarningHandlerGuard quiet(&silent);
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, ns,
                                                  std::make_optional(c10::DispatchKey::PrivateUse1),
                                                  __FILE__, __LINE__);
  for (const auto& name : names) {
    library->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<kernel>());
  }
  libraries.push_back(std::move(library));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  at::RegisterPrivateUse1HooksInterface(&hooks);
  c10::SetAllocator(kNeuron, &allocator);
  module.def("run_on_cpu_for", &register_for<&run_on_cpu>,
             "Give each named overload of a namespace CPU's kernel on neuron.");
  module.def("run_composite_for", &register_for<&run_composite>,
             "Run each named composite overload of a namespace on neuron tensors, seen by the profiler.");
  module.def("set_device_count", [](int n) {
    TORCH_CHECK(n > 0 && n <= kMaxDevices, "a node has 1 to ", kMaxDevices, " neuron devices");
    device_count = n;
  });
  module.def("set_mismatch_handler", [](py::object handler) {
    mismatch_handler = handler.inc_ref().ptr();  // kept for the life of the process
  });
  module.def("set_fallback_handler", [](const std::vector<std::string>& names, py::object handler) {
    implemented = std::unordered_set<std::string>(names.begin(), names.end());
    fallback_handler = handler.inc_ref().ptr();  // kept for the life of the process
  });
  module.def("set_layout_handler", [](py::object handler) {
    layout_handler = handler.inc_ref().ptr();  // kept for the life of the process
  });
  module.def("set_index_handler", [](py::object handler) {
    index_handler = handler.inc_ref().ptr();  // kept for the life of the process
  });
  module.def("set_fp32_accumulate", [](const std::vector<std::string>& names) {
    accumulating = std::unordered_set<std::string>(names.begin(), names.end());
  });
  module.def("set_rounding_handler", [](py::object handler) {
    rounding_handler = handler.inc_ref().ptr();  // kept for the life of the process
  });
  module.def("set_recorder", [](py::object callback) {
    recorder = callback.inc_ref().ptr();  // kept for the life of the process
  });
  module.def("set_recording", [](bool on) { recording = on; });
  module.def("recording", []() { return recording.load(); });
  module.def("current_device", []() { return static_cast<int>(current_device); });
  module.def("set_device", [](int device) { current_device = checked_index(device); });
  module.def("memory_allocated", [](int device) { return counters[checked_index(device)].allocated.load(); });
  module.def("max_memory_allocated", [](int device) { return counters[checked_index(device)].peak.load(); });
  module.def("reset_peak_memory", [](int device) {
    auto& c = counters[checked_index(device)];
    c.peak = c.allocated.load();
  });
  module.def("cpu_view", &as_cpu, "A CPU tensor over a neuron tensor's memory (no copy).");
  module.def("neuron_view", [](const at::Tensor& cpu, int device) {
    return with_storage(adopt(cpu.storage(), checked_index(device)), cpu, c10::DispatchKey::PrivateUse1);
  }, "A neuron tensor over a CPU tensor's memory (no copy).");
}
