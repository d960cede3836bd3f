// The platform of a process that owns V8 (Debian's libnode108, V8 10.2): see platform.h.

#include "platform.h"

#include <libplatform/libplatform.h>

#include <mutex>

using namespace v8;

namespace {

// The platform lives as long as the process and is deliberately never destroyed: isolates on other
// threads (pre-warmed runtimes, cells still running) may outlive static destruction at exit, and
// tearing the platform down under them crashes the process.
Platform* g_platform = nullptr;
std::once_flag g_initialize_once;
bool g_initialized = false;

}  // namespace

namespace cm {

bool InitializePlatform() {
  std::call_once(g_initialize_once, [] {
    // The cell has no WebAssembly; keep V8 from compiling any.
    V8::SetFlagsFromString("--no-expose-wasm");
    // The snapshot is the library's own, read-only on disk: checking its checksum on every
    // isolate cost about 4% of a cell's start (profiled).
    V8::SetFlagsFromString("--no-verify-snapshot-checksum");
    V8::InitializeICU();
    g_platform = platform::NewDefaultPlatform().release();
    V8::InitializePlatform(g_platform);
    g_initialized = V8::Initialize();
  });
  return g_initialized;
}

Isolate* NewIsolate(const Isolate::CreateParams& params) { return Isolate::New(params); }

void DisposeIsolate(Isolate* isolate) { isolate->Dispose(); }

void RunForegroundTasks(Isolate* isolate) {
  while (platform::PumpMessageLoop(g_platform, isolate)) {
  }
}

}  // namespace cm
