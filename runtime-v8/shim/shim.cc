// codemode's native shim over V8: the official Node 24 binary's V8 13.6, reached from the engine
// library that Node loads (platform.h says how the shim shares Node's platform).
//
// A narrow C ABI: create and delete a runtime (one isolate, one context, limits), run the bootstrap
// script that installs the globals, evaluate the cell's ES module, call the bootstrap's dispatcher,
// run microtasks, read the module's state, and terminate from any thread. Every JavaScript global
// reaches Rust through one host-call entry point.
//
// Ownership rules
// - `cm_runtime_new` allocates a `cm_runtime`; only `cm_runtime_delete` frees it, exactly once.
// - A `cm_runtime` and its isolate belong to the thread that created it: every function here except
//   `cm_runtime_terminate` and `cm_v8_version` must be called on that thread, never concurrently.
// - `cm_runtime_terminate` may be called from any thread while the runtime is alive (it only calls
//   `Isolate::TerminateExecution`, which V8 documents as thread-safe). The caller guarantees that
//   no call races with `cm_runtime_delete`; the Rust side does this with a mutex.
// - Strings cross as `cm_str` (pointer + length, UTF-8, not NUL-terminated). A `cm_str` passed into
//   the shim is borrowed for the duration of the call. A `cm_str` the host callback writes to `out`
//   must stay valid until the callback's caller has copied it (the shim copies it at once).
// - The text returned by `cm_runtime_last_error` is owned by the runtime and valid until the next
//   call on that runtime.
// - No C++ exception crosses the ABI: every entry point catches and reports `CM_INTERNAL_ERROR`.
// - The V8 platform lives as long as the process (platform.h); so does the bootstrap's code cache
//   (`g_bootstrap_cache`), which every runtime compiles the bootstrap from once it exists.
// - The startup snapshot (`cm_snapshot_prepare`) is made at most once and lives as
//   long as the process: every isolate made afterwards is made from its blob, and keeps a pointer
//   to it. Its objects point to native code only through `kExternalReferences`.
// - The fatal hook (`cm_set_fatal_hook`) is a plain function pointer held for the process's life;
//   it is called on the thread that hit the error, and V8 ends the process when it returns.
// - The `host_data` pointer is opaque here; the Rust side owns it and keeps it alive for as long as
//   the runtime.
// - The isolate's data slot 0 holds its `cm_runtime` (for the promise-rejection callback), set when
//   the runtime is created and valid until it is deleted.
// - Every `Global` a `cm_runtime` holds is reset inside `cm_runtime_delete`, before the isolate is
//   disposed: a `Global` destroyed after its isolate crashes the process.
// - A runtime has a context only once `cm_runtime_bootstrap` made it; the other entry points that
//   run JavaScript refuse to run before.
// - `cm_runtime_reset` drops a runtime's context, for another cell in the same isolate, whose
//   bootstrap makes a fresh one (the caller makes sure no terminator of the old cell can still
//   reach the isolate). From then on the old context is unreachable from the runtime: its code, should V8 ever run any of it again (a
//   FinalizationRegistry callback, a microtask left queued), can no longer call the host or record
//   a throw or rejection, because every entry point from JavaScript checks that it is called from
//   the runtime's current context.

#include <v8.h>

#include "platform.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

static_assert(V8_MAJOR_VERSION == 13 && V8_MINOR_VERSION == 6,
              "the shim is written for V8 13.6 (Node 24); point the build at the pinned Node's "
              "headers (cargo xtask setup-v8)");
static_assert(sizeof(size_t) == sizeof(void*), "cm_str assumes size_t is pointer-sized");
static_assert(sizeof(clockid_t) == sizeof(int32_t), "CPU clocks cross the ABI as int32_t");

using namespace v8;

extern "C" {

struct cm_str {
  const char* ptr;  // NULL means "absent" (JavaScript undefined)
  size_t len;
};

// Results of the entry points that run JavaScript.
enum cm_status : int32_t {
  CM_OK = 0,
  CM_EXCEPTION = 1,   // JavaScript threw; cm_runtime_last_error has the formatted error
  CM_TERMINATED = 2,  // execution was terminated (terminate, exit, heap limit, host request)
  CM_INTERNAL_ERROR = 3,  // the shim itself failed; cm_runtime_last_error says how
};

// What the host callback tells the shim to do.
enum cm_host_reply : int32_t {
  CM_HOST_UNDEFINED = 0,  // return undefined
  CM_HOST_STRING = 1,     // return *out as a string
  CM_HOST_THROW = 2,      // throw new Error(*out)
  CM_HOST_TERMINATE = 3,  // terminate execution at once (exit(), or the host cannot go on)
};

// Module states for cm_runtime_module_state.
enum cm_module_state : int32_t {
  CM_MODULE_PENDING = 0,
  CM_MODULE_FULFILLED = 1,
  CM_MODULE_REJECTED = 2,  // cm_runtime_last_error has the formatted reason
};

typedef int32_t (*cm_host_fn)(void* host_data, int32_t op, cm_str a, cm_str b, cm_str* out);

// Kinds of fatal error reported to the fatal hook.
enum cm_fatal_kind : int32_t {
  CM_FATAL_ERROR = 0,          // a failed V8 check or API misuse
  CM_FATAL_HEAP_LIMIT = 1,     // a JavaScript heap past its limit, termination not taking effect
  CM_FATAL_OUT_OF_MEMORY = 2,  // the process could not get memory
};

// The fatal hook: kind, then NUL-terminated location and message, valid only during the call.
typedef void (*cm_fatal_fn)(int32_t kind, const char* location, const char* message);

}  // extern "C"

namespace {

// The resource name of the cell's module: stack traces read `at cell.js:LINE:COLUMN`.
constexpr const char* kCellResourceName = "cell.js";
// The resource name of the bootstrap script; its frames are dropped from error texts.
constexpr const char* kBootstrapResourceName = "codemode:bootstrap";
// The throw-site module (`codemode_engine::globals::THROW_SITE_MODULE`): the only module a cell
// may import. It exports an object (`THROW_SITE_BINDING`) whose property (`THROW_SITE_PROPERTY`)
// has a setter that throws the value assigned and records where: the session writes each `throw`
// of the cell as `$$.t=`, same length, and appends the import, so a thrown value that is not an
// Error still has a position, and no global is defined for it. V8 reports a property store at its
// `=`, so the `throw` keyword is that many columns before.
constexpr const char* kThrowSiteModule = "codemode:throw-site";
constexpr const char* kThrowSiteBinding = "$$";
constexpr const char* kThrowSiteProperty = "t";
constexpr int kThrowSiteColumnOffset = 4;
// The code range of each isolate on V8 13.6 (see cm_runtime_new).
constexpr size_t kCodeRangeBytes = 64u << 20;

// An ArrayBuffer allocator that counts what it hands out, so that typed arrays and buffers count
// against the cell's heap limit instead of growing outside it.
class CountingAllocator final : public ArrayBuffer::Allocator {
 public:
  explicit CountingAllocator(size_t limit) : limit_(limit) {}

  void* Allocate(size_t length) override {
    if (!Reserve(length)) return nullptr;
    void* data = calloc(length ? length : 1, 1);
    if (!data) Release(length);
    return data;
  }

  void* AllocateUninitialized(size_t length) override {
    if (!Reserve(length)) return nullptr;
    void* data = malloc(length ? length : 1);
    if (!data) Release(length);
    return data;
  }

  void Free(void* data, size_t length) override {
    free(data);
    Release(length);
  }

 private:
  // A reservation past the limit is refused, and stops the cell as its heap limit does: the
  // cell ends with the heap-limit error instead of a RangeError it could catch and retry.
  bool Reserve(size_t length) {
    size_t current = used_.load(std::memory_order_relaxed);
    do {
      if (length > limit_ || current > limit_ - length) {
        refused_.store(true);
        if (Isolate* isolate = isolate_.load()) isolate->TerminateExecution();
        return false;
      }
    } while (!used_.compare_exchange_weak(current, current + length, std::memory_order_relaxed));
    return true;
  }

  void Release(size_t length) { used_.fetch_sub(length, std::memory_order_relaxed); }

 public:
  size_t used() const { return used_.load(std::memory_order_relaxed); }
  // Whether a reservation past the limit was refused.
  bool refused() const { return refused_.load(); }
  // The isolate a refusal stops (set once it exists).
  void set_isolate(Isolate* isolate) { isolate_.store(isolate); }

 private:

  const size_t limit_;
  std::atomic<size_t> used_{0};
  std::atomic<bool> refused_{false};
  std::atomic<Isolate*> isolate_{nullptr};
};

}  // namespace

namespace {

// A startup snapshot (V8 13.6 only, see cm_snapshot_prepare): V8's built-ins plus one context in
// which the bootstrap `source` ran with `snapshot_config`, its dispatcher kept as the context's
// data. A runtime whose isolate is made from it and that is bootstrapped with `source` and
// `config` deserialises that context instead of running the script. Made once, never freed.
struct Snapshot {
  std::string source;
  std::string config;
  StartupData blob;
};

// Where the bootstrapped context and its dispatcher are in a Snapshot.
constexpr size_t kSnapshotContextIndex = 0;
constexpr size_t kSnapshotDispatchIndex = 0;

}  // namespace

struct cm_runtime {
  Isolate* isolate = nullptr;
  // The snapshot the isolate was made from, or null (V8's own).
  const Snapshot* snapshot = nullptr;
  std::unique_ptr<CountingAllocator> allocator;
  Global<Context> context;
  Global<Function> dispatch;
  Global<Promise> module_promise;
  cm_host_fn host = nullptr;
  void* host_data = nullptr;
  std::atomic<bool> heap_limit_hit{false};
  // The heap limit the isolate was made with: a heap found above it (a built-in such as a global
  // `match` builds its result where V8 does not check the limit) is the limit hit too. Kept apart
  // from `heap_limit_hit`, which NearHeapLimit reads to tell its second call from its first.
  size_t heap_limit_bytes = 0;
  std::atomic<bool> heap_found_over{false};
  std::string last_error;
  // Where the cell last threw through the throw-site object, or where the last promise rejected
  // without a handler was rejected in the cell (line, 1-based column; 0 when unknown), and with
  // what value: a thrown value that is not an Error carries no position of its own, so its error
  // text is located from here.
  Global<Value> rejected_value;
  int rejected_line = 0;
  int rejected_column = 0;
};

namespace {

// Everything an entry point that touches JavaScript enters, in the order V8 requires: the isolate,
// a handle scope, then the runtime's context. Members are constructed in declaration order and
// destroyed in reverse.
class Entered {
 public:
  explicit Entered(cm_runtime* rt)
      : isolate(rt->isolate),
        isolate_scope(rt->isolate),
        handle_scope(rt->isolate),
        context(rt->context.Get(rt->isolate)),
        context_scope(context) {}

  Isolate* const isolate;

 private:
  Isolate::Scope isolate_scope;
  HandleScope handle_scope;

 public:
  const Local<Context> context;

 private:
  Context::Scope context_scope;
};

// Whether JavaScript running now runs in the runtime's current context: code of a context that
// cm_runtime_reset replaced must never reach the host or the runtime's records.
bool InCurrentContext(cm_runtime* rt, Local<Context> context) {
  return !rt->context.IsEmpty() && context == rt->context.Get(rt->isolate);
}

Local<String> NewString(Isolate* isolate, const char* data, size_t length) {
  Local<String> result;
  if (!String::NewFromUtf8(isolate, data, NewStringType::kNormal, static_cast<int>(length))
           .ToLocal(&result)) {
    return String::Empty(isolate);
  }
  return result;
}

Local<String> NewString(Isolate* isolate, const std::string& text) {
  return NewString(isolate, text.data(), text.size());
}

std::string ToStdString(Isolate* isolate, Local<Value> value) {
  // A lone surrogate crosses as its own three bytes (NO_OPTIONS: V8 would write U+FFFD instead),
  // which the host detects and refuses where a value must be exact (stored keys and values).
  String::Utf8Value utf8(isolate, value, String::NO_OPTIONS);
  if (*utf8 == nullptr) return std::string();
  return std::string(*utf8, utf8.length());
}

// Whether a script resource name is the cell's.
bool IsCellResource(Isolate* isolate, Local<Value> resource) {
  return !resource.IsEmpty() && resource->IsString() &&
         ToStdString(isolate, resource) == kCellResourceName;
}

// `    at FUNCTION (cell.js:LINE:COLUMN)` for each frame of the cell in `trace`.
std::string CellFrames(Isolate* isolate, Local<StackTrace> trace) {
  std::string frames;
  if (trace.IsEmpty()) return frames;
  for (int index = 0; index < trace->GetFrameCount(); index++) {
    Local<StackFrame> frame = trace->GetFrame(isolate, index);
    if (!IsCellResource(isolate, frame->GetScriptName())) continue;
    std::string location = std::string(kCellResourceName) + ":" +
                           std::to_string(frame->GetLineNumber()) + ":" +
                           std::to_string(frame->GetColumn());
    Local<String> function = frame->GetFunctionName();
    std::string name = function.IsEmpty() ? std::string() : ToStdString(isolate, function);
    frames += "\n    at " + (name.empty() ? location : name + " (" + location + ")");
  }
  return frames;
}

// The error text of the globals contract, computed by V8 rather than read from the cell's own
// objects, so that a cell cannot hide or replace it (`Error.stackTraceLimit = 0`, a custom
// `Error.prepareStackTrace`, a throwing `toString`): V8's rendering of any thrown value (as in
// "Uncaught TypeError: …", "Uncaught null", "Uncaught Symbol(boom)"), then the cell's frames from
// the stack trace V8 captured when the error was created, or else the position recorded for this
// very value (a marked `throw`, see ThrowAtSite, or where an unhandled rejection happened), or
// else the frames or position of V8's message.
std::string FormatException(cm_runtime* rt, Local<Context> context, Local<Value> exception,
                            Local<Message> message) {
  Isolate* isolate = rt->isolate;
  TryCatch inner(isolate);  // nothing here may throw into the cell
  bool recorded = !rt->rejected_value.IsEmpty() && rt->rejected_line > 0 &&
                  rt->rejected_value.Get(isolate)->SameValue(exception);
  if (message.IsEmpty()) message = Exception::CreateMessage(isolate, exception);
  std::string text;
  if (!message.IsEmpty()) {
    text = ToStdString(isolate, message->Get());
    const std::string uncaught = "Uncaught ";
    if (text.rfind(uncaught, 0) == 0) text = text.substr(uncaught.size());
  }
  if (text.empty()) text = "uncaught exception (a value V8 could not describe)";
  std::string frames = CellFrames(isolate, Exception::GetStackTrace(exception));
  if (frames.empty() && recorded) {
    frames = "\n    at " + std::string(kCellResourceName) + ":" + std::to_string(rt->rejected_line) +
             ":" + std::to_string(rt->rejected_column);
  }
  if (frames.empty() && !message.IsEmpty()) {
    frames = CellFrames(isolate, message->GetStackTrace());
  }
  if (frames.empty() && !message.IsEmpty() &&
      IsCellResource(isolate, message->GetScriptResourceName())) {
    int line = message->GetLineNumber(context).FromMaybe(0);
    int column = message->GetStartColumn(context).FromMaybe(-1) + 1;
    if (line > 0 && column > 0) {
      frames = "\n    at " + std::string(kCellResourceName) + ":" + std::to_string(line) + ":" +
               std::to_string(column);
    }
  }
  if (frames.empty() && !exception->IsObject()) {
    // Thrown where the session could not mark the throw (inside `eval`, say), or rejected from
    // outside the cell: V8 keeps no position for a primitive. Say so, and how to get one.
    frames =
        "\n    (a thrown value that is not an Error carries no position; throw new Error(...) to "
        "get one)";
  }
  return text + frames;
}

// Receives the messages V8 would otherwise print itself: with no listener, V8 writes uncaught
// errors it cannot hand to anyone (from a FinalizationRegistry callback, say) to standard output,
// which is the JSON-RPC channel of `codemode mcp` and the JSON of `codemode run --json`. A cell must
// never write there, so they are dropped; the errors that matter reach the runtime as exceptions.
void DiscardMessage(Local<Message> message, Local<Value> data) {}

// Records where an unhandled rejection happened in the cell, for FormatException's fallback.
void RecordRejection(PromiseRejectMessage rejection) {
  if (rejection.GetEvent() != kPromiseRejectWithNoHandler) return;
  Local<Promise> promise = rejection.GetPromise();
  Isolate* isolate = promise->GetIsolate();
  cm_runtime* rt = static_cast<cm_runtime*>(isolate->GetData(0));
  if (!rt) return;
  Local<Context> creation;
  if (!promise->GetCreationContext().ToLocal(&creation) || !InCurrentContext(rt, creation)) return;
  // An async function rejects with what a marked `throw` threw: the throw's position, recorded
  // already, is the one to keep (the rejection happens where the function ends).
  if (!rt->rejected_value.IsEmpty() &&
      rt->rejected_value.Get(isolate)->SameValue(rejection.GetValue())) {
    return;
  }
  Local<StackTrace> trace = StackTrace::CurrentStackTrace(isolate, 8);
  for (int index = 0; index < trace->GetFrameCount(); index++) {
    Local<StackFrame> frame = trace->GetFrame(isolate, index);
    if (!IsCellResource(isolate, frame->GetScriptName())) continue;
    rt->rejected_value.Reset(isolate, rejection.GetValue());
    rt->rejected_line = frame->GetLineNumber();
    rt->rejected_column = frame->GetColumn();
    return;
  }
}

// What an entry point that runs JavaScript answers before the runtime has a context.
int32_t NoContext(cm_runtime* rt) {
  rt->last_error = "the runtime has no global scope yet: bootstrap it first";
  return CM_INTERNAL_ERROR;
}

// Turns the outcome of a V8 call into a status, recording the error text on exceptions.
int32_t Settle(cm_runtime* rt, Local<Context> context, TryCatch& try_catch, bool succeeded) {
  Isolate* isolate = rt->isolate;
  if (try_catch.HasTerminated() || isolate->IsExecutionTerminating()) return CM_TERMINATED;
  if (succeeded) return CM_OK;
  if (!try_catch.HasCaught()) {
    rt->last_error = "the engine failed without an exception";
    return CM_EXCEPTION;
  }
  rt->last_error = FormatException(rt, context, try_catch.Exception(), try_catch.Message());
  return CM_EXCEPTION;
}

// The single host-call entry point: host(op, a?, b?) from the bootstrap.
// It finds its runtime in the isolate's data slot 0 rather than in data of its own, so that the
// function can be part of a startup snapshot (made in an isolate with no runtime, where it throws).
void HostCall(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  cm_runtime* rt = static_cast<cm_runtime*>(isolate->GetData(0));
  if (!rt || !InCurrentContext(rt, isolate->GetCurrentContext())) {
    isolate->ThrowException(Exception::Error(
        NewString(isolate, "this code belongs to a cell that has ended: it cannot reach the host")));
    return;
  }
  int32_t op = info[0]->Int32Value(isolate->GetCurrentContext()).FromMaybe(-1);
  std::string arguments[2];
  cm_str views[2] = {{nullptr, 0}, {nullptr, 0}};
  for (int index = 0; index < 2; index++) {
    Local<Value> value = info[index + 1];
    if (value->IsUndefined()) continue;
    arguments[index] = ToStdString(isolate, value);
    views[index] = {arguments[index].data(), arguments[index].size()};
  }
  cm_str out = {nullptr, 0};
  int32_t reply = rt->host(rt->host_data, op, views[0], views[1], &out);
  switch (reply) {
    case CM_HOST_UNDEFINED:
      return;
    case CM_HOST_STRING: {
      Local<String> result;
      if (!String::NewFromUtf8(isolate, out.ptr ? out.ptr : "", NewStringType::kNormal,
                               static_cast<int>(out.len))
               .ToLocal(&result)) {
        isolate->ThrowException(Exception::RangeError(
            NewString(isolate, "the host's answer is too large for a JavaScript string")));
        return;
      }
      info.GetReturnValue().Set(result);
      return;
    }
    case CM_HOST_THROW:
      isolate->ThrowException(
          Exception::Error(NewString(isolate, out.ptr ? out.ptr : "", out.ptr ? out.len : 0)));
      return;
    default:
      isolate->TerminateExecution();
      return;
  }
}

// The setter of the throw-site object's property: records the value and the cell position of the
// assignment (the marked `throw`), then throws the value, as the `throw` it stands for would.
void ThrowAtSite(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  cm_runtime* rt = static_cast<cm_runtime*>(info.Data().As<External>()->Value());
  Local<Value> value = info[0];
  Local<StackTrace> trace = StackTrace::CurrentStackTrace(isolate, 1);
  if (trace->GetFrameCount() > 0 && InCurrentContext(rt, isolate->GetCurrentContext())) {
    Local<StackFrame> frame = trace->GetFrame(isolate, 0);
    if (IsCellResource(isolate, frame->GetScriptName())) {
      rt->rejected_value.Reset(isolate, value);
      rt->rejected_line = frame->GetLineNumber();
      rt->rejected_column = std::max(1, frame->GetColumn() - kThrowSiteColumnOffset);
    }
  }
  isolate->ThrowException(value);
}

// The throw-site module's evaluation: its object, with the throwing setter, as its one export.
MaybeLocal<Value> EvaluateThrowSiteModule(Local<Context> context, Local<Module> module) {
  Isolate* isolate = context->GetIsolate();
  cm_runtime* rt = static_cast<cm_runtime*>(isolate->GetData(0));
  Local<Function> getter;
  Local<Function> setter;
  // Both halves of the accessor are given; reading the property gives undefined.
  if (!Function::New(context, [](const FunctionCallbackInfo<Value>&) {}).ToLocal(&getter) ||
      !Function::New(context, ThrowAtSite, External::New(isolate, rt)).ToLocal(&setter)) {
    return MaybeLocal<Value>();
  }
  Local<Object> site = Object::New(isolate, Null(isolate), nullptr, nullptr, 0);
  site->SetAccessorProperty(NewString(isolate, kThrowSiteProperty), getter, setter,
                            static_cast<PropertyAttribute>(DontEnum | DontDelete));
  if (site->SetIntegrityLevel(context, IntegrityLevel::kFrozen).IsNothing() ||
      module->SetSyntheticModuleExport(isolate, NewString(isolate, kThrowSiteBinding), site)
          .IsNothing()) {
    return MaybeLocal<Value>();
  }
  Local<Promise::Resolver> resolver;
  if (!Promise::Resolver::New(context).ToLocal(&resolver) ||
      resolver->Resolve(context, Undefined(isolate)).IsNothing()) {
    return MaybeLocal<Value>();
  }
  return resolver->GetPromise();
}

// `import x from "y"` inside the cell: the throw-site module, or an error.
MaybeLocal<Module> ResolveCellImport(Local<Context> context, Local<String> specifier,
                                     Local<FixedArray>, Local<Module>) {
  Isolate* isolate = context->GetIsolate();
  if (ToStdString(isolate, specifier) == kThrowSiteModule) {
    std::vector<Local<String>> exports = {NewString(isolate, kThrowSiteBinding)};
    MemorySpan<const Local<String>> export_names(exports.data(), exports.size());
    return Module::CreateSyntheticModule(isolate, NewString(isolate, kThrowSiteModule),
                                         export_names, EvaluateThrowSiteModule);
  }
  std::string text = "Unsupported import in exec: " + ToStdString(isolate, specifier);
  isolate->ThrowException(Exception::Error(NewString(isolate, text)));
  return MaybeLocal<Module>();
}

bool RefuseWasm(Local<Context>, Local<String>) { return false; }

// `await import("y")` inside the cell: a promise rejected with the same error.
MaybeLocal<Promise> RefuseDynamicImport(Local<Context> context, Local<Data>, Local<Value>,
                                        Local<String> specifier, Local<FixedArray>) {
  Isolate* isolate = context->GetIsolate();
  Local<Promise::Resolver> resolver;
  if (!Promise::Resolver::New(context).ToLocal(&resolver)) return MaybeLocal<Promise>();
  std::string text = "Unsupported import in exec: " + ToStdString(isolate, specifier);
  if (resolver->Reject(context, Exception::Error(NewString(isolate, text))).IsNothing()) {
    return MaybeLocal<Promise>();
  }
  return resolver->GetPromise();
}

// V8's code cache of the bootstrap, made by the first runtime that runs it and then read by every
// other; set once, never freed (isolates on other threads may read it until the process ends).
struct BootstrapCache {
  std::string source;
  std::vector<uint8_t> data;
};
std::atomic<const BootstrapCache*> g_bootstrap_cache{nullptr};

bool SameText(const std::string& text, cm_str other) {
  return text.size() == other.len && std::memcmp(text.data(), other.ptr, other.len) == 0;
}

// Runs the bootstrap `source` in `context` (entered) and calls the installer it evaluates to with
// a new host function and `config`; returns the dispatcher. Empty on failure: with `*error` set
// when the bootstrap broke its contract, else with the exception in the caller's TryCatch. With
// `code_cache`, compiles from V8's code cache of the bootstrap once one exists, and makes it.
MaybeLocal<Function> InstallGlobals(Isolate* isolate, Local<Context> context, cm_str source,
                                    cm_str config, bool code_cache, std::string* error) {
  ScriptOrigin origin(NewString(isolate, kBootstrapResourceName));
  Local<Script> script;
  Local<Value> installer;
  // Every isolate compiles the same bootstrap: after the first, from V8's code cache of it.
  const BootstrapCache* cache =
      code_cache ? g_bootstrap_cache.load(std::memory_order_acquire) : nullptr;
  bool use_cache = cache && SameText(cache->source, source);
  ScriptCompiler::Source script_source(
      NewString(isolate, source.ptr, source.len), origin,
      use_cache ? new ScriptCompiler::CachedData(cache->data.data(),
                                                 static_cast<int>(cache->data.size()))
                : nullptr);
  if (!ScriptCompiler::Compile(context, &script_source,
                               use_cache ? ScriptCompiler::kConsumeCodeCache
                                         : ScriptCompiler::kNoCompileOptions)
           .ToLocal(&script) ||
      !script->Run(context).ToLocal(&installer)) {
    return MaybeLocal<Function>();
  }
  if (!installer->IsFunction()) {
    *error = "the bootstrap script must evaluate to a function";
    return MaybeLocal<Function>();
  }
  Local<Function> host_function;
  if (!Function::New(context, HostCall).ToLocal(&host_function)) return MaybeLocal<Function>();
  Local<Value> arguments[2] = {host_function, NewString(isolate, config.ptr, config.len)};
  Local<Value> dispatch;
  if (!installer.As<Function>()->Call(context, Undefined(isolate), 2, arguments).ToLocal(&dispatch)) {
    return MaybeLocal<Function>();
  }
  if (!dispatch->IsFunction()) {
    *error = "the bootstrap must return its dispatcher function";
    return MaybeLocal<Function>();
  }
  if (code_cache && !cache) {
    // Made after the bootstrap ran, so the functions it compiled lazily are in the cache too.
    std::unique_ptr<ScriptCompiler::CachedData> data(
        ScriptCompiler::CreateCodeCache(script->GetUnboundScript()));
    if (data && data->length > 0) {
      auto made = std::make_unique<BootstrapCache>();
      made->source.assign(source.ptr, source.len);
      made->data.assign(data->data, data->data + data->length);
      const BootstrapCache* expected = nullptr;
      if (g_bootstrap_cache.compare_exchange_strong(expected, made.get(),
                                                    std::memory_order_acq_rel)) {
        made.release();  // lives for the process, like the platform
      }
    }
  }
  return dispatch.As<Function>();
}

// The native functions a snapshot's objects may point to: V8 stores an index into this list, and
// every isolate made from the snapshot is given the same list.
const intptr_t kExternalReferences[] = {reinterpret_cast<intptr_t>(HostCall), 0};

// The process's snapshot once made (cm_snapshot_prepare), or why it could not be; both set once
// under g_snapshot_mutex and never freed.
std::mutex g_snapshot_mutex;
std::atomic<const Snapshot*> g_snapshot{nullptr};
const std::string* g_snapshot_error = nullptr;

// The text of a JavaScript exception caught while making a snapshot.
std::string DescribeException(Isolate* isolate, TryCatch& try_catch) {
  if (try_catch.HasTerminated()) return "the bootstrap was terminated";
  if (!try_catch.HasCaught()) return std::string();
  return "the bootstrap threw " + ToStdString(isolate, try_catch.Exception());
}

// Makes a Snapshot (see there) in an isolate of its own, registered with the platform like every
// other; null with `*error` set on failure.
std::unique_ptr<Snapshot> MakeSnapshot(cm_str source, cm_str config, cm_str snapshot_config,
                                       std::string* error) {
  Isolate* isolate = cm::AllocateIsolate();
  if (!isolate) {
    *error = "no V8 platform to make it with";
    return nullptr;
  }
  std::unique_ptr<ArrayBuffer::Allocator> allocator(ArrayBuffer::Allocator::NewDefaultAllocator());
  Isolate::CreateParams params;
  params.array_buffer_allocator = allocator.get();
  params.external_references = kExternalReferences;
  params.constraints.set_code_range_size_in_bytes(kCodeRangeBytes);
  StartupData blob = {nullptr, 0};
  {
    // Initialises the isolate and enters it; the isolate stays ours to dispose of.
    SnapshotCreator creator(isolate, params);
    bool bootstrapped = false;
    {
      HandleScope handle_scope(isolate);
      creator.SetDefaultContext(Context::New(isolate));
      Local<Context> context = Context::New(isolate);
      Local<Function> dispatch;
      {
        Context::Scope context_scope(context);
        TryCatch try_catch(isolate);
        if (InstallGlobals(isolate, context, source, snapshot_config, /*code_cache=*/false, error)
                .ToLocal(&dispatch)) {
          bootstrapped = true;
        } else if (error->empty()) {
          *error = DescribeException(isolate, try_catch);
        }
      }
      if (bootstrapped) {
        bootstrapped = creator.AddContext(context) == kSnapshotContextIndex &&
                       creator.AddData(context, dispatch) == kSnapshotDispatchIndex;
        if (!bootstrapped) *error = "the snapshot's context was not where it is looked for";
      }
    }
    if (bootstrapped) blob = creator.CreateBlob(SnapshotCreator::FunctionCodeHandling::kKeep);
  }
  cm::DisposeIsolate(isolate);
  if (!blob.data || blob.raw_size <= 0) {
    delete[] blob.data;
    if (error->empty()) *error = "V8 made an empty snapshot";
    return nullptr;
  }
  auto snapshot = std::make_unique<Snapshot>();
  snapshot->source.assign(source.ptr, source.len);
  snapshot->config.assign(config.ptr, config.len);
  snapshot->blob = blob;
  return snapshot;
}

// The process's fatal hook (cm_set_fatal_hook), or null: told of a fatal error before V8 ends
// the process, on the thread that hit it.
std::atomic<cm_fatal_fn> g_fatal_hook{nullptr};

void ReportFatal(int32_t kind, const char* location, const char* message) {
  cm_fatal_fn hook = g_fatal_hook.load();
  if (hook) hook(kind, location ? location : "", message ? message : "");
}

void OnFatalError(const char* location, const char* message) {
  ReportFatal(CM_FATAL_ERROR, location, message);
}

// V8 calls a heap that cannot grow a heap OOM whether the heap reached its limit or the process
// could not get memory (its ceiling, or the machine's): only the first is the cell's heap limit.
void OnOutOfMemory(const char* location, const OOMDetails& details) {
  bool is_heap_oom = details.is_heap_oom;
  bool heap_limit = is_heap_oom && location && std::strstr(location, "heap limit") != nullptr;
  ReportFatal(heap_limit ? CM_FATAL_HEAP_LIMIT : CM_FATAL_OUT_OF_MEMORY, location,
              heap_limit ? "JavaScript heap out of memory" : "process out of memory");
}

// Called by V8 as the heap approaches its limit: stop the cell, and give V8 room to unwind instead
// of aborting the process. A heap that reaches the limit again before the termination took effect
// (a long built-in that never checks for interrupts) is reported to the fatal hook when there is
// one, which ends the process: a sandboxed engine process stops there instead of growing without
// bound.
size_t NearHeapLimit(void* data, size_t current_heap_limit, size_t) {
  cm_runtime* rt = static_cast<cm_runtime*>(data);
  if (rt->heap_limit_hit.exchange(true) && g_fatal_hook.load()) {
    ReportFatal(CM_FATAL_HEAP_LIMIT, "NearHeapLimit", "heap limit exceeded");
  }
  rt->isolate->TerminateExecution();
  return current_heap_limit * 2;
}

}  // namespace

#define CM_GUARD_BEGIN try {
#define CM_GUARD_END(rt)                          \
  }                                               \
  catch (...) {                                   \
    (rt)->last_error = "internal error in the V8 shim"; \
    return CM_INTERNAL_ERROR;                     \
  }

extern "C" {

const char* cm_v8_version() { return V8::GetVersion(); }

// Initialises V8 once per process; later calls do nothing. Returns 0 on success.
int32_t cm_v8_initialize() {
  try {
    return cm::InitializePlatform() ? 0 : 1;
  } catch (...) {
    return 1;
  }
}

// A new runtime whose heap (and ArrayBuffer memory) may grow to `heap_limit_bytes`. Returns NULL
// when the isolate cannot be created.
cm_runtime* cm_runtime_new(size_t heap_limit_bytes, cm_host_fn host, void* host_data) {
  cm_runtime* rt = nullptr;
  try {
    rt = new cm_runtime();
    rt->allocator = std::make_unique<CountingAllocator>(heap_limit_bytes);
    rt->heap_limit_bytes = heap_limit_bytes;
    rt->host = host;
    rt->host_data = host_data;
    Isolate::CreateParams params;
    params.array_buffer_allocator = rt->allocator.get();
    params.constraints.ConfigureDefaultsFromHeapSize(0, heap_limit_bytes);
    // V8 13.6 reserves each isolate's code range writable (counted by RLIMIT_DATA) and 512 MiB by
    // default; a cell's compiled code fits a small fraction of this.
    params.constraints.set_code_range_size_in_bytes(kCodeRangeBytes);
    // Made from the process's startup snapshot when there is one (cm_snapshot_prepare).
    if (const Snapshot* snapshot = g_snapshot.load(std::memory_order_acquire)) {
      params.snapshot_blob = &snapshot->blob;
      params.external_references = kExternalReferences;
      rt->snapshot = snapshot;
    }
    rt->isolate = cm::NewIsolate(params);
    if (!rt->isolate) {
      delete rt;
      return nullptr;
    }
    Isolate* isolate = rt->isolate;
    isolate->SetMicrotasksPolicy(MicrotasksPolicy::kExplicit);
    isolate->AddNearHeapLimitCallback(NearHeapLimit, rt);
    rt->allocator->set_isolate(isolate);
    isolate->SetHostImportModuleDynamicallyCallback(RefuseDynamicImport);
    // The cell has no WebAssembly (the bootstrap deletes the global): should a reference to it
    // survive anyway, V8 compiles no module for it.
    isolate->SetAllowWasmCodeGenerationCallback(RefuseWasm);
    // Error objects get a structured stack trace V8 keeps for itself, which the cell cannot
    // shorten or rewrite; unhandled rejections are located for errors that carry no position.
    isolate->SetCaptureStackTraceForUncaughtExceptions(true, 10, StackTrace::kDetailed);
    isolate->SetData(0, rt);
    isolate->SetPromiseRejectCallback(RecordRejection);
    isolate->AddMessageListenerWithErrorLevel(DiscardMessage, Isolate::kMessageAll);
    isolate->SetFatalErrorHandler(OnFatalError);
    isolate->SetOOMErrorHandler(OnOutOfMemory);
    return rt;
  } catch (...) {
    if (rt) {
      if (rt->isolate) cm::DisposeIsolate(rt->isolate);
      delete rt;
    }
    return nullptr;
  }
}

void cm_runtime_delete(cm_runtime* rt) {
  if (!rt) return;
  try {
    {
      Isolate::Scope isolate_scope(rt->isolate);
      rt->module_promise.Reset();
      rt->rejected_value.Reset();
      rt->dispatch.Reset();
      rt->context.Reset();
    }
    cm::DisposeIsolate(rt->isolate);
  } catch (...) {
  }
  delete rt;
}

// Readies the runtime for another cell in the same isolate (its bootstrap makes a fresh context),
// unless the isolate is better replaced: its heap hit the limit (which V8's callback then raised), it holds more than
// kMaxResetHeapBytes of heap or ArrayBuffer memory (a cell that used much is not kept around).
// (How many cells an isolate may serve is the caller's policy.) Returns 0 when reset (the bootstrap must run again), 1
// when the runtime should be deleted instead, CM_INTERNAL_ERROR on failure (delete it too). A
// termination requested before the call is cancelled: the caller has made sure that no terminator
// of the old cell can reach the isolate any more, so none can be requested after.
constexpr size_t kMaxResetHeapBytes = 16 * 1024 * 1024;

int32_t cm_runtime_reset(cm_runtime* rt) {
  try {
    if (rt->heap_limit_hit.load() || rt->heap_found_over.load() || rt->allocator->refused()) {
      return 1;
    }
    Isolate* isolate = rt->isolate;
    Isolate::Scope isolate_scope(isolate);
    HeapStatistics statistics;
    isolate->GetHeapStatistics(&statistics);
    if (statistics.used_heap_size() > kMaxResetHeapBytes ||
        rt->allocator->used() > kMaxResetHeapBytes) {
      return 1;
    }
    isolate->CancelTerminateExecution();
    rt->module_promise.Reset();
    rt->rejected_value.Reset();
    rt->rejected_line = 0;
    rt->rejected_column = 0;
    rt->dispatch.Reset();
    rt->context.Reset();
    rt->last_error.clear();
    return 0;
  } catch (...) {
    return CM_INTERNAL_ERROR;
  }
}

// Sets the process's fatal hook (null: none). V8 ends the process when a fatal hook returns.
void cm_set_fatal_hook(cm_fatal_fn hook) { g_fatal_hook.store(hook); }

// Thread-safe: stops whatever JavaScript runs now, or the next that would run.
void cm_runtime_terminate(cm_runtime* rt) { rt->isolate->TerminateExecution(); }

// Whether the cell went past its heap limit: V8 said so (NearHeapLimit), an ArrayBuffer past it
// was refused, or the heap is above it now (V8 builds some results, such as a global `match`'s
// array, without checking the limit, and the cell would go on holding them).
int32_t cm_runtime_heap_limit_hit(cm_runtime* rt) {
  if (rt->heap_limit_hit.load() || rt->heap_found_over.load() || rt->allocator->refused()) {
    return 1;
  }
  try {
    Isolate::Scope isolate_scope(rt->isolate);
    HeapStatistics statistics;
    rt->isolate->GetHeapStatistics(&statistics);
    if (statistics.used_heap_size() > rt->heap_limit_bytes) {
      rt->heap_found_over.store(true);
      return 1;
    }
  } catch (...) {
  }
  return 0;
}

const char* cm_runtime_last_error(cm_runtime* rt, size_t* length) {
  *length = rt->last_error.size();
  return rt->last_error.data();
}

// Gives the runtime a fresh context with the bootstrap run in it, and keeps the dispatcher: from
// the isolate's snapshot when it was made for this `source` and `config`; otherwise a new context
// in which `source` runs as a classic script that must evaluate to a function, called with the
// host entry point and `config`, returning the dispatcher.
int32_t cm_runtime_bootstrap(cm_runtime* rt, cm_str source, cm_str config) {
  CM_GUARD_BEGIN
  Isolate* isolate = rt->isolate;
  Isolate::Scope isolate_scope(isolate);
  HandleScope handle_scope(isolate);
  rt->dispatch.Reset();
  rt->context.Reset();
  const Snapshot* snapshot = rt->snapshot;
  if (snapshot && SameText(snapshot->source, source) && SameText(snapshot->config, config)) {
    Local<Context> context;
    Local<Function> dispatch;
    if (!Context::FromSnapshot(isolate, kSnapshotContextIndex).ToLocal(&context) ||
        !context->GetDataFromSnapshotOnce<Function>(kSnapshotDispatchIndex).ToLocal(&dispatch)) {
      rt->last_error = "the startup snapshot gave no bootstrapped context";
      return CM_INTERNAL_ERROR;
    }
    rt->context.Reset(isolate, context);
    rt->dispatch.Reset(isolate, dispatch);
    return CM_OK;
  }
  Local<Context> context = Context::New(isolate);
  if (context.IsEmpty()) {
    rt->last_error = "V8 could not make a context";
    return CM_INTERNAL_ERROR;
  }
  rt->context.Reset(isolate, context);
  Context::Scope context_scope(context);
  TryCatch try_catch(isolate);
  Local<Function> dispatch;
  std::string error;
  if (!InstallGlobals(isolate, context, source, config, /*code_cache=*/true, &error)
           .ToLocal(&dispatch)) {
    if (!error.empty()) {
      rt->last_error = error;
      return CM_INTERNAL_ERROR;
    }
    return Settle(rt, context, try_catch, false);
  }
  rt->dispatch.Reset(isolate, dispatch);
  return CM_OK;
  CM_GUARD_END(rt)
}

// Makes the process's startup snapshot for runtimes bootstrapped with `source` and `config`: the
// bootstrap runs with `snapshot_config` (which tells it that it runs for a snapshot, so that it
// leaves alone what V8 adds to each context it deserialises) in a context kept in the snapshot. Runtimes created afterwards are made from it.
// Only one snapshot exists per process, made by the first call; later calls only say whether it
// fits. Returns 0 when the snapshot for this source and config exists, 1 when there is none for
// them (one was made for another config), CM_INTERNAL_ERROR when making it
// failed, with `*error` set to why (text valid for the process's life). Thread-safe.
int32_t cm_snapshot_prepare(cm_str source, cm_str config, cm_str snapshot_config, cm_str* error) {
  *error = {nullptr, 0};
  try {
    std::lock_guard<std::mutex> lock(g_snapshot_mutex);
    if (const Snapshot* made = g_snapshot.load(std::memory_order_acquire)) {
      return SameText(made->source, source) && SameText(made->config, config) ? CM_OK : 1;
    }
    if (g_snapshot_error) {
      *error = {g_snapshot_error->data(), g_snapshot_error->size()};
      return CM_INTERNAL_ERROR;
    }
    std::string why;
    std::unique_ptr<Snapshot> made = MakeSnapshot(source, config, snapshot_config, &why);
    if (!made) {
      g_snapshot_error = new std::string(why.empty() ? "V8 could not make it" : why);
      *error = {g_snapshot_error->data(), g_snapshot_error->size()};
      return CM_INTERNAL_ERROR;
    }
    g_snapshot.store(made.release(), std::memory_order_release);  // lives for the process
    return CM_OK;
  } catch (...) {
    return CM_INTERNAL_ERROR;
  }
}

// Compiles, instantiates and evaluates the cell's source as an ES module; its evaluation promise is
// kept for cm_runtime_module_state.
int32_t cm_runtime_evaluate_module(cm_runtime* rt, cm_str source) {
  CM_GUARD_BEGIN
  if (rt->context.IsEmpty()) return NoContext(rt);
  Entered entered(rt);
  Isolate* isolate = entered.isolate;
  Local<Context> context = entered.context;
  TryCatch try_catch(isolate);
  try_catch.SetVerbose(false);
  ScriptOrigin origin(NewString(isolate, kCellResourceName), 0, 0, false, -1, Local<Value>(),
                      false, false, /*is_module=*/true);
  ScriptCompiler::Source compiler_source(NewString(isolate, source.ptr, source.len), origin);
  Local<Module> module;
  if (!ScriptCompiler::CompileModule(isolate, &compiler_source).ToLocal(&module)) {
    return Settle(rt, context, try_catch, false);
  }
  if (module->InstantiateModule(context, ResolveCellImport).IsNothing()) {
    return Settle(rt, context, try_catch, false);
  }
  Local<Value> evaluation;
  if (!module->Evaluate(context).ToLocal(&evaluation)) {
    return Settle(rt, context, try_catch, false);
  }
  if (!evaluation->IsPromise()) {
    rt->last_error = "module evaluation did not return a promise";
    return CM_INTERNAL_ERROR;
  }
  rt->module_promise.Reset(isolate, evaluation.As<Promise>());
  return Settle(rt, context, try_catch, true);
  CM_GUARD_END(rt)
}

// Calls the dispatcher with (kind, id, payload): delivers a tool result or fires a timer.
int32_t cm_runtime_dispatch(cm_runtime* rt, int32_t kind, cm_str id, cm_str payload) {
  CM_GUARD_BEGIN
  if (rt->context.IsEmpty()) return NoContext(rt);
  Entered entered(rt);
  Isolate* isolate = entered.isolate;
  Local<Context> context = entered.context;
  TryCatch try_catch(isolate);
  Local<Value> arguments[3] = {
      Integer::New(isolate, kind),
      NewString(isolate, id.ptr ? id.ptr : "", id.len),
      payload.ptr ? Local<Value>(NewString(isolate, payload.ptr, payload.len))
                  : Local<Value>(Undefined(isolate)),
  };
  bool succeeded =
      !rt->dispatch.Get(isolate)->Call(context, Undefined(isolate), 3, arguments).IsEmpty();
  return Settle(rt, context, try_catch, succeeded);
  CM_GUARD_END(rt)
}

// Runs every queued microtask (and any platform task V8 posted for this isolate).
int32_t cm_runtime_run_microtasks(cm_runtime* rt) {
  CM_GUARD_BEGIN
  if (rt->context.IsEmpty()) return NoContext(rt);
  Entered entered(rt);
  Isolate* isolate = entered.isolate;
  cm::RunForegroundTasks(isolate);
  isolate->PerformMicrotaskCheckpoint();
  return isolate->IsExecutionTerminating() ? CM_TERMINATED : CM_OK;
  CM_GUARD_END(rt)
}

// Whether the module's evaluation promise has settled; on rejection the reason's error text.
int32_t cm_runtime_module_state(cm_runtime* rt) {
  CM_GUARD_BEGIN
  if (rt->context.IsEmpty()) return NoContext(rt);
  Entered entered(rt);
  Isolate* isolate = entered.isolate;
  Local<Context> context = entered.context;
  if (rt->module_promise.IsEmpty()) return CM_MODULE_PENDING;
  Local<Promise> promise = rt->module_promise.Get(isolate);
  switch (promise->State()) {
    case Promise::kPending:
      return CM_MODULE_PENDING;
    case Promise::kFulfilled:
      return CM_MODULE_FULFILLED;
    case Promise::kRejected: {
      rt->last_error = FormatException(rt, context, promise->Result(), Local<Message>());
      return CM_MODULE_REJECTED;
    }
  }
  return CM_MODULE_PENDING;
  CM_GUARD_END(rt)
}

// The CPU-time clock of the calling thread, for a watchdog on another thread to read.
// Returns 0 and writes the clock on success.
int32_t cm_current_thread_cpu_clock(int32_t* clock) {
  clockid_t id;
  if (pthread_getcpuclockid(pthread_self(), &id) != 0) return 1;
  *clock = static_cast<int32_t>(id);
  return 0;
}

// CPU time used so far by the thread whose clock this is, in nanoseconds; -1 if the clock cannot
// be read (the thread has ended).
int64_t cm_cpu_clock_nanos(int32_t clock) {
  struct timespec now;
  if (clock_gettime(static_cast<clockid_t>(clock), &now) != 0) return -1;
  return static_cast<int64_t>(now.tv_sec) * 1000000000LL + now.tv_nsec;
}

}  // extern "C"
