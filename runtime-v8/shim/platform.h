// The V8 platform the shim runs on (platform_node.cc): the engine library inside the official
// Node 24 binary (V8 13.6). Node has initialised V8 and owns the platform; the shim only registers
// each isolate it makes with it, runs that isolate's foreground tasks itself, and never
// initialises or disposes V8.
//
// Ownership: the platform lives as long as the process. An isolate made by `NewIsolate` is freed
// only by `DisposeIsolate`, on the thread that made it, after every `Global` into it is reset.

#ifndef CODEMODE_SHIM_PLATFORM_H_
#define CODEMODE_SHIM_PLATFORM_H_

#include <v8.h>

namespace cm {

// Makes V8 usable in this process, once; later calls return the first answer. True on success.
bool InitializePlatform();

// A new isolate with `params`, or NULL.
v8::Isolate* NewIsolate(const v8::Isolate::CreateParams& params);

// An isolate allocated and registered with the platform but not initialised, for a
// `v8::SnapshotCreator` to initialise, or NULL.
// Disposed of with DisposeIsolate.
v8::Isolate* AllocateIsolate();

// Disposes an isolate made by NewIsolate.
void DisposeIsolate(v8::Isolate* isolate);

// Runs the foreground tasks V8 posted for `isolate` that are due (finalisers, GC follow-ups).
void RunForegroundTasks(v8::Isolate* isolate);

}  // namespace cm

#endif  // CODEMODE_SHIM_PLATFORM_H_
