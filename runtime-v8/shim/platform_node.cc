// The platform of the engine library inside the official Node 24 binary (V8 13.6): see platform.h.
//
// Node initialised V8 before it loaded the library and owns its platform; V8's flags are on Node's
// command line. Each isolate the shim makes is registered with Node's platform through a delegate
// of the shim's own (`IsolateTasks`), so that V8's foreground tasks for it queue here and run on
// the isolate's own thread when the runtime pumps them, never on Node's event loop, which does
// not run while the library serves.
//
// Ownership: `cm_node_attach` is called once, on Node's main thread, while Node's isolate is
// entered (from the library's module initialiser), before any runtime exists. An isolate's
// `IsolateTasks` is made by NewIsolate, kept in the isolate's data slot 1, and deleted by
// DisposeIsolate after the isolate is gone.

#include "platform.h"

#include <node.h>

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

using namespace v8;

namespace {

// Node's platform, set once by cm_node_attach.
node::MultiIsolatePlatform* g_platform = nullptr;

// The data slot that holds an isolate's IsolateTasks (slot 0 is the runtime's).
constexpr uint32_t kTasksSlot = 1;

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One isolate's foreground tasks: posted from any thread, run on the isolate's thread.
class ForegroundTasks final : public TaskRunner {
 public:
  bool IdleTasksEnabled() override { return false; }
  bool NonNestableTasksEnabled() const override { return true; }
  bool NonNestableDelayedTasksEnabled() const override { return true; }

  // The next task that is due, or NULL.
  std::unique_ptr<Task> NextDue() {
    std::lock_guard<std::mutex> lock(mutex_);
    double now = NowSeconds();
    for (auto it = delayed_.begin(); it != delayed_.end();) {
      if (it->first <= now) {
        ready_.push_back(std::move(it->second));
        it = delayed_.erase(it);
      } else {
        ++it;
      }
    }
    if (ready_.empty()) return nullptr;
    std::unique_ptr<Task> task = std::move(ready_.front());
    ready_.pop_front();
    return task;
  }

 protected:
  void PostTaskImpl(std::unique_ptr<Task> task, const SourceLocation&) override { Ready(std::move(task)); }
  void PostNonNestableTaskImpl(std::unique_ptr<Task> task, const SourceLocation&) override {
    Ready(std::move(task));
  }
  void PostDelayedTaskImpl(std::unique_ptr<Task> task, double delay, const SourceLocation&) override {
    Delayed(std::move(task), delay);
  }
  void PostNonNestableDelayedTaskImpl(std::unique_ptr<Task> task, double delay,
                                      const SourceLocation&) override {
    Delayed(std::move(task), delay);
  }
  void PostIdleTaskImpl(std::unique_ptr<IdleTask>, const SourceLocation&) override {}

 private:
  void Ready(std::unique_ptr<Task> task) {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.push_back(std::move(task));
  }
  void Delayed(std::unique_ptr<Task> task, double delay) {
    std::lock_guard<std::mutex> lock(mutex_);
    delayed_.emplace_back(NowSeconds() + delay, std::move(task));
  }

  std::mutex mutex_;
  std::deque<std::unique_ptr<Task>> ready_;
  std::vector<std::pair<double, std::unique_ptr<Task>>> delayed_;
};

// What Node's platform asks of an isolate registered with a delegate.
class IsolateTasks final : public node::IsolatePlatformDelegate {
 public:
  std::shared_ptr<TaskRunner> GetForegroundTaskRunner() override { return tasks; }
  bool IdleTasksEnabled() override { return false; }

  const std::shared_ptr<ForegroundTasks> tasks = std::make_shared<ForegroundTasks>();
};

}  // namespace

extern "C" {

// Called once by the library's module initialiser on Node's main thread: finds Node's platform.
// Returns 0 on success.
int32_t cm_node_attach() {
  try {
    Isolate* isolate = Isolate::GetCurrent();
    if (!isolate) return 1;
    HandleScope handle_scope(isolate);
    Local<Context> context = isolate->GetCurrentContext();
    if (context.IsEmpty()) return 1;
    node::Environment* environment = node::GetCurrentEnvironment(context);
    if (!environment) return 1;
    g_platform = node::GetMultiIsolatePlatform(environment);
    return g_platform ? 0 : 1;
  } catch (...) {
    return 1;
  }
}

}  // extern "C"

namespace cm {

bool InitializePlatform() { return g_platform != nullptr; }

Isolate* AllocateIsolate() {
  if (!g_platform) return nullptr;
  Isolate* isolate = Isolate::Allocate();
  auto tasks = std::make_unique<IsolateTasks>();
  g_platform->RegisterIsolate(isolate, tasks.get());
  isolate->SetData(kTasksSlot, tasks.release());
  return isolate;
}

Isolate* NewIsolate(const Isolate::CreateParams& params) {
  Isolate* isolate = AllocateIsolate();
  if (isolate) Isolate::Initialize(isolate, params);
  return isolate;
}

void DisposeIsolate(Isolate* isolate) {
  auto* tasks = static_cast<IsolateTasks*>(isolate->GetData(kTasksSlot));
  g_platform->DisposeIsolate(isolate);
  delete tasks;
}

void RunForegroundTasks(Isolate* isolate) {
  auto* tasks = static_cast<IsolateTasks*>(isolate->GetData(kTasksSlot));
  while (std::unique_ptr<Task> task = tasks->tasks->NextDue()) {
    task->Run();
  }
}

}  // namespace cm
