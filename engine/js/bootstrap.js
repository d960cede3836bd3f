// The bootstrap of every cell of a script engine (V8, QuickJS): runs once, as a classic script,
// before the cell's module.
//
// It evaluates to a function that receives the native host entry point and the runtime's
// configuration (JSON), installs the globals, removes what a cell must not have, and returns the
// dispatcher through which the runtime thread installs the cell's tools, delivers tool results
// and fires timers. The bootstrap does not depend on the cell, so a pre-warmed runtime runs it
// ahead of time; only the tools are installed when the cell arrives (DISPATCH_INSTALL_TOOLS,
// before the cell's module runs). Every rule that does not need JavaScript (ids, output items,
// stored values, refusals) is decided in Rust behind `host`; this file does only what needs
// JavaScript: String(), JSON.stringify/parse, promises and callbacks. It defines no built-in of
// the language: both engines have today's natively (the conformance suite holds them to it).
(function installCodemodeGlobals(host, configJson) {
  'use strict';

  // The kinds of `dispatch(kind, id, payload)`.
  const DISPATCH_RESOLVE = 1;
  const DISPATCH_REJECT = 2;
  const DISPATCH_TIMER = 3;
  const DISPATCH_INSTALL_TOOLS = 4;

  // Built-ins captured now, so that a cell that overwrites them cannot break its own globals.
  const $String = String;
  const $Number = Number;
  const $Error = Error;
  const $TypeError = TypeError;
  const $RangeError = RangeError;
  const $Promise = Promise;
  const $Map = Map;
  const $Array = Array;
  const $Object = Object;
  const $Symbol = Symbol;
  const $Math = Math;
  const jsonStringify = JSON.stringify;
  const jsonParse = JSON.parse;
  const defineProperty = Object.defineProperty;
  const freeze = Object.freeze;
  const uncurry = (method) => Function.prototype.call.bind(method);
  const mapGet = uncurry(Map.prototype.get);
  const mapSet = uncurry(Map.prototype.set);
  const mapDelete = uncurry(Map.prototype.delete);
  const mapHas = uncurry(Map.prototype.has);
  const arrayPush = uncurry(Array.prototype.push);
  const arraySort = uncurry(Array.prototype.sort);
  const arraySplice = uncurry(Array.prototype.splice);
  const arrayFilter = uncurry(Array.prototype.filter);
  const arrayEvery = uncurry(Array.prototype.every);
  const stringToLowerCase = uncurry(String.prototype.toLowerCase);
  const stringIncludes = uncurry(String.prototype.includes);
  const stringSplit = uncurry(String.prototype.split);
  const stringTrim = uncurry(String.prototype.trim);
  const promiseReject = $Promise.reject.bind($Promise);
  // Spreading an array goes through Array.prototype[Symbol.iterator], which a cell may replace:
  // the globals pass argument lists with apply instead.
  const reflectApply = Reflect.apply;
  const arraySpliceMethod = Array.prototype.splice;

  const config = jsonParse(configJson);
  // The ops of `host(op, a?, b?)`, numbered once on the Rust side (HostOp, in
  // engine/src/script/ops.rs) and received with the configuration.
  const {
    TEXT: OP_TEXT,
    IMAGE: OP_IMAGE,
    AUDIO: OP_AUDIO,
    STORE: OP_STORE,
    LOAD: OP_LOAD,
    NOTIFY: OP_NOTIFY,
    YIELD: OP_YIELD,
    EXIT: OP_EXIT,
    TOOL_CALL: OP_TOOL_CALL,
    SET_TIMEOUT: OP_SET_TIMEOUT,
    CLEAR_TIMEOUT: OP_CLEAR_TIMEOUT,
    GENERATED_IMAGE: OP_GENERATED_IMAGE,
    TEST_PANIC: OP_TEST_PANIC,
  } = config.ops;
  const global = globalThis;

  function defineGlobal(name, value) {
    defineProperty(global, name, { value, writable: true, enumerable: false, configurable: true });
  }

  // The display rule of text() and notify(): primitives by String(), anything else by
  // JSON.stringify, or String() when that yields undefined. Exceptions (a throwing toJSON, a cycle)
  // propagate to the caller.
  function display(value) {
    if (value === null || value === undefined) return $String(value);
    const type = typeof value;
    if (type === 'boolean' || type === 'number' || type === 'bigint' || type === 'string') {
      return $String(value);
    }
    const json = jsonStringify(value);
    return json === undefined ? $String(value) : json;
  }

  // JSON text of a value, or undefined when it has none (including when stringifying throws).
  function jsonOrUndefined(value) {
    try {
      return jsonStringify(value);
    } catch {
      return undefined;
    }
  }

  // ---- output, notifications, control ----

  function text(value) {
    host(OP_TEXT, display(value));
  }

  function image(urlOrItem, detail) {
    host(OP_IMAGE, jsonOrUndefined(urlOrItem), detail == null ? undefined : $String(detail));
  }

  function generatedImage(result) {
    host(OP_GENERATED_IMAGE, jsonOrUndefined(result));
  }

  function audio(urlOrItem) {
    host(OP_AUDIO, jsonOrUndefined(urlOrItem));
  }

  function notify(value) {
    host(OP_NOTIFY, display(value));
  }

  function yield_control() {
    host(OP_YIELD);
  }

  function exit() {
    host(OP_EXIT);
  }

  // ---- stored values ----

  function store(key, value) {
    const name = $String(key);
    let json;
    try {
      json = jsonStringify(value);
    } catch (error) {
      // Running out of memory is not the value's fault: it ends the cell as the heap limit (an
      // engine that lets a cell catch it, QuickJS, reports it as null or an InternalError).
      if (error === null || (typeof error === 'object' && error.name === 'InternalError' && error.message === 'out of memory')) {
        throw error;
      }
      // A cycle, a BigInt, a throwing getter or toJSON: say why, not only that it failed.
      let reason;
      try {
        reason = $String(error !== null && typeof error === 'object' ? error.message : error);
      } catch {
        reason = 'it threw while being serialized';
      }
      throw new $Error(`Unable to store ${jsonStringify(name)}: the value cannot be serialized (${reason}).`);
    }
    host(OP_STORE, name, json);
  }

  function load(key) {
    const json = host(OP_LOAD, $String(key));
    return json === undefined ? undefined : jsonParse(json);
  }

  // ---- timers ----

  const timerCallbacks = new $Map();

  function setTimeout(callback, delay, ...args) {
    if (typeof callback !== 'function') {
      throw new $TypeError('setTimeout expects a function as its first argument');
    }
    const id = $Number(host(OP_SET_TIMEOUT, $String($Number(delay))));
    mapSet(timerCallbacks, id, () => reflectApply(callback, undefined, args));
    return id;
  }

  function clearTimeout(id) {
    if (id === undefined || id === null) return;
    if (typeof id !== 'number') {
      throw new $TypeError('clearTimeout expects a timer id returned by setTimeout');
    }
    if (!(id > 0)) return;
    if (mapDelete(timerCallbacks, id)) host(OP_CLEAR_TIMEOUT, $String(id));
  }

  // ---- tools ----

  // Resolvers of the tool calls in flight, by call id.
  const pendingToolCalls = new $Map();

  function callTool(index, name, argument) {
    let input;
    if (argument !== undefined) {
      input = jsonStringify(argument);
      if (input === undefined) {
        throw new $TypeError(`tools.${name} expects a JSON-serialisable argument`);
      }
    }
    const id = host(OP_TOOL_CALL, $String(index), input);
    return new $Promise((resolve, reject) => {
      mapSet(pendingToolCalls, id, { resolve, reject });
    });
  }

  // The cell's tools: installed once, by the dispatcher, before the cell's module runs.
  function installTools(installed) {
    const listing = installed.tools;
    const tools = {};
    const allTools = [];
    listing.forEach((tool, index) => {
      const name = tool.name;
      const call = function (argument) {
        try {
          return callTool(index, name, argument);
        } catch (error) {
          return promiseReject(error);
        }
      };
      defineProperty(call, 'name', { value: name });
      defineProperty(tools, name, { value: call, enumerable: true });
      const entry = { name, description: tool.description, declaration: tool.declaration };
      // What the tool says of its effects (MCP's readOnlyHint, destructiveHint, ...), when it
      // says anything.
      if (tool.annotations !== undefined) {
        entry.annotations = freeze(tool.annotations);
      }
      arrayPush(allTools, freeze(entry));
    });
    // The servers whose tools are left out because they are down now, and why: not an entry of
    // the list (code that maps over the tools sees tools only).
    const unavailable = [];
    installed.unavailable.forEach((down) => {
      arrayPush(unavailable, freeze({ server: down.server, reason: down.reason }));
    });
    defineProperty(allTools, 'unavailable', { value: freeze(unavailable) });
    freeze(tools);
    freeze(allTools);
    defineGlobal('tools', tools);
    defineGlobal('ALL_TOOLS', allTools);
    defineGlobal('search_tools', function search_tools(query) {
      // Every word of the query, case-insensitively, in the tool's name or description.
      const words = arrayFilter(
        stringSplit(stringToLowerCase(stringTrim($String(query === undefined ? '' : query))), ' '),
        (word) => word !== '',
      );
      return arrayFilter(allTools, (tool) => {
        const haystack = stringToLowerCase(tool.name + ' ' + tool.description);
        return arrayEvery(words, (word) => stringIncludes(haystack, word));
      });
    });
  }
  let toolsInstalled = false;

  defineGlobal('text', text);
  defineGlobal('image', image);
  defineGlobal('generatedImage', generatedImage);
  defineGlobal('audio', audio);
  defineGlobal('store', store);
  defineGlobal('load', load);
  defineGlobal('notify', notify);
  defineGlobal('yield_control', yield_control);
  defineGlobal('exit', exit);
  defineGlobal('setTimeout', setTimeout);
  defineGlobal('clearTimeout', clearTimeout);
  // How many cells this runtime served before this one (a lane may keep it for the next): told
  // with the cell's tools (DISPATCH_INSTALL_TOOLS), since the bootstrap may run before.
  let cellsBefore = 0;
  if (config.testHooks) {
    defineGlobal('__codemode_test_panic', () => host(OP_TEST_PANIC));
    defineGlobal('__codemode_test_cells_before', () => cellsBefore);
    // Whether this global scope was made from the engine's snapshot of a bootstrapped one.
    const fromSnapshot = !!config.forSnapshot;
    defineGlobal('__codemode_test_scope_from_snapshot', () => fromSnapshot);
  }

  // ---- what a cell must not have ----

  // Run when the cell's tools arrive, before any of its code, not while installing: an engine
  // that makes each global scope from a snapshot of this one (V8) adds some of these back to every
  // scope it makes, and looks for others while it does.
  function removeWhatACellMustNotHave() {
    delete global.console;
    delete global.SharedArrayBuffer;
    delete global.Atomics;
    delete global.WebAssembly;
  }

  // ---- the dispatcher the runtime thread calls ----

  return function dispatch(kind, id, payload) {
    if (kind === DISPATCH_INSTALL_TOOLS) {
      if (toolsInstalled) return;
      toolsInstalled = true;
      removeWhatACellMustNotHave();
      cellsBefore = $Number(id);
      installTools(jsonParse(payload));
      return;
    }
    if (kind === DISPATCH_TIMER) {
      const timerId = $Number(id);
      const callback = mapGet(timerCallbacks, timerId);
      if (callback === undefined) return;
      mapDelete(timerCallbacks, timerId);
      // A throwing callback propagates to the runtime thread, which fails the cell with it.
      callback();
      return;
    }
    const resolvers = mapGet(pendingToolCalls, id);
    if (resolvers === undefined) return;
    mapDelete(pendingToolCalls, id);
    if (kind === DISPATCH_RESOLVE) {
      resolvers.resolve(payload === undefined ? undefined : jsonParse(payload));
    } else if (kind === DISPATCH_REJECT) {
      resolvers.reject(new $Error(payload));
    }
  };
});
