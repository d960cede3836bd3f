// The bootstrap of every cell of a script engine (V8, QuickJS): runs once, as a classic script,
// before the cell's module.
//
// It evaluates to a function that receives the native host entry point and the runtime's
// configuration (JSON), installs the globals and the prelude of built-ins that V8 10.2 lacks,
// removes what a cell must not have, and returns the dispatcher through which the runtime thread
// installs the cell's tools, delivers tool results and fires timers. The bootstrap does not depend
// on the cell, so a pre-warmed runtime runs it ahead of time; only the tools are installed when the
// cell arrives (DISPATCH_INSTALL_TOOLS, before the cell's module runs). Every rule that does not need JavaScript (ids, output
// items, stored values, refusals) is decided in Rust behind `host`; this file does only what needs
// JavaScript: String(), JSON.stringify/parse, promises and callbacks.
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
  if (config.testHooks) {
    defineGlobal('__codemode_test_panic', () => host(OP_TEST_PANIC));
    // How many cells this runtime served before this one (a lane may keep it for the next).
    defineGlobal('__codemode_test_cells_before', () => config.cellsBefore);
  }

  // ---- what a cell must not have ----

  delete global.console;
  delete global.SharedArrayBuffer;
  delete global.Atomics;
  delete global.WebAssembly;

  // ---- prelude: built-ins models use that V8 10.2 lacks ----

  function definePolyfill(target, name, value) {
    if (name in target) return;
    defineProperty(target, name, { value, writable: true, enumerable: false, configurable: true });
  }

  function toLength(value) {
    const number = $Math.trunc($Number(value));
    if (!(number > 0)) return 0;
    return $Math.min(number, 2 ** 53 - 1);
  }

  function toIntegerOrInfinity(value) {
    const number = $Number(value);
    if (number !== number) return 0;
    return $Math.trunc(number);
  }

  function copyOf(arrayLike) {
    const object = $Object(arrayLike);
    const length = toLength(object.length);
    const copy = new $Array(length);
    for (let index = 0; index < length; index++) copy[index] = object[index];
    return copy;
  }

  definePolyfill($Array.prototype, 'toSorted', function toSorted(compare) {
    if (compare !== undefined && typeof compare !== 'function') {
      throw new $TypeError('The comparison function must be either a function or undefined');
    }
    return arraySort(copyOf(this), compare);
  });

  definePolyfill($Array.prototype, 'toReversed', function toReversed() {
    const source = copyOf(this);
    const length = source.length;
    const reversed = new $Array(length);
    for (let index = 0; index < length; index++) reversed[index] = source[length - 1 - index];
    return reversed;
  });

  definePolyfill($Array.prototype, 'toSpliced', function toSpliced(start, skipCount, ...items) {
    const copy = copyOf(this);
    if (arguments.length === 0) return copy;
    if (arguments.length === 1) {
      arraySplice(copy, start);
    } else {
      const spliceArguments = [start, skipCount];
      for (let index = 0; index < items.length; index++) spliceArguments[index + 2] = items[index];
      reflectApply(arraySpliceMethod, copy, spliceArguments);
    }
    return copy;
  });

  definePolyfill($Array.prototype, 'with', function (index, value) {
    const copy = copyOf(this);
    const relative = toIntegerOrInfinity(index);
    const actual = relative >= 0 ? relative : copy.length + relative;
    if (actual >= copy.length || actual < 0) throw new $RangeError('Invalid index : ' + index);
    copy[actual] = value;
    return copy;
  });

  definePolyfill($Object, 'groupBy', function groupBy(items, callback) {
    if (typeof callback !== 'function') throw new $TypeError('callback is not a function');
    const groups = $Object.create(null);
    let index = 0;
    for (const item of items) {
      const key = callback(item, index++);
      const property = typeof key === 'symbol' ? key : $String(key);
      if (groups[property] === undefined) groups[property] = [];
      arrayPush(groups[property], item);
    }
    return groups;
  });

  definePolyfill($Map, 'groupBy', function groupBy(items, callback) {
    if (typeof callback !== 'function') throw new $TypeError('callback is not a function');
    const groups = new $Map();
    let index = 0;
    for (const item of items) {
      let key = callback(item, index++);
      if (key === 0) key = 0; // normalise -0 as Map does
      if (!mapHas(groups, key)) mapSet(groups, key, []);
      arrayPush(mapGet(groups, key), item);
    }
    return groups;
  });

  definePolyfill($Promise, 'withResolvers', function withResolvers() {
    let resolve;
    let reject;
    const promise = new this((resolveWith, rejectWith) => {
      resolve = resolveWith;
      reject = rejectWith;
    });
    return { promise, resolve, reject };
  });

  definePolyfill($Array, 'fromAsync', async function fromAsync(items, mapFn, thisArg) {
    if (mapFn !== undefined && typeof mapFn !== 'function') {
      throw new $TypeError('Array.fromAsync: mapFn is not a function');
    }
    const result = [];
    let index = 0;
    const add = async (value) => {
      const awaited = await value;
      arrayPush(result, mapFn === undefined ? awaited : await mapFn.call(thisArg, awaited, index));
      index++;
    };
    if (items != null && typeof items[$Symbol.asyncIterator] === 'function') {
      for await (const value of items) await add(value);
    } else if (items != null && typeof items[$Symbol.iterator] === 'function') {
      for (const value of items) await add(value);
    } else {
      const object = $Object(items);
      const length = toLength(object.length);
      for (let position = 0; position < length; position++) await add(object[position]);
    }
    return result;
  });

  // ---- the dispatcher the runtime thread calls ----

  return function dispatch(kind, id, payload) {
    if (kind === DISPATCH_INSTALL_TOOLS) {
      if (toolsInstalled) return;
      toolsInstalled = true;
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
