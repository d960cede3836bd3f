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

  // ---- prelude: built-ins models use that V8 10.2 lacks ----

  // A scope being snapshotted lacks the built-ins its engine still ships behind flags, which the
  // engine adds to each scope it makes from the snapshot (and would add a second time over a
  // polyfill): the prelude defines nothing there. An engine that snapshots (V8 13.6) has every
  // built-in of the prelude natively, which the conformance suite holds.
  const definesPolyfills = !config.forSnapshot;
  function definePolyfill(target, name, value) {
    if (!definesPolyfills || name in target) return;
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

  // ---- prelude of ES2024–ES2025 library built-ins that V8 10.2 lacks ----
  // Only library functions: the syntax of those years (the `v` flag, `using`, RegExp modifiers,
  // duplicate named groups) and Float16Array cannot be supplied from JavaScript, and the
  // conformance suite's section on today's built-ins lists them as what V8 10.2 lacks.

  const isObject = (value) =>
    value !== null && (typeof value === 'object' || typeof value === 'function');
  const $Set = Set;
  const $RegExp = RegExp;
  const $WeakMap = WeakMap;
  const objectCreate = Object.create;
  const getPrototypeOf = Object.getPrototypeOf;
  const setHas = uncurry(Set.prototype.has);
  const setAdd = uncurry(Set.prototype.add);
  const setDelete = uncurry(Set.prototype.delete);
  const setSize = uncurry(Object.getOwnPropertyDescriptor(Set.prototype, 'size').get);
  const setValues = uncurry(Set.prototype.values);
  const setIteratorNext = uncurry(getPrototypeOf(new Set().values()).next);
  const weakMapGet = uncurry(WeakMap.prototype.get);
  const weakMapSet = uncurry(WeakMap.prototype.set);
  const charCodeAt = uncurry(String.prototype.charCodeAt);
  const codePointAt = uncurry(String.prototype.codePointAt);
  const numberToString = uncurry(Number.prototype.toString);
  const stringPadStart = uncurry(String.prototype.padStart);
  const fromCharCode = String.fromCharCode;

  // The elements of a Set, as a list taken now (the methods below may change the set they read).
  function elementsOf(set) {
    const elements = [];
    const iterator = setValues(set);
    for (let step = setIteratorNext(iterator); !step.done; step = setIteratorNext(iterator)) {
      arrayPush(elements, step.value);
    }
    return elements;
  }

  // GetSetRecord: what a Set method reads of its argument (size, has, keys).
  function setRecord(other) {
    if (!isObject(other)) throw new $TypeError('The argument must be set-like (an object)');
    const size = $Number(other.size);
    if (size !== size) throw new $TypeError("The argument's size is not a number");
    const integerSize = toIntegerOrInfinity(size);
    if (integerSize < 0) throw new $RangeError("The argument's size must not be negative");
    const has = other.has;
    if (typeof has !== 'function') throw new $TypeError("The argument's has is not a function");
    const keys = other.keys;
    if (typeof keys !== 'function') throw new $TypeError("The argument's keys is not a function");
    return { set: other, size: integerSize, has, keys };
  }

  function recordHas(record, value) {
    return !!reflectApply(record.has, record.set, [value]);
  }

  // Calls `visit` with each key of the set-like `record` until it returns true; then closes the
  // keys' iterator and returns true.
  function someKey(record, visit) {
    const iterator = reflectApply(record.keys, record.set, []);
    if (!isObject(iterator)) throw new $TypeError("The argument's keys() is not an iterator");
    const next = iterator.next;
    for (;;) {
      const step = reflectApply(next, iterator, []);
      if (!isObject(step)) throw new $TypeError('An iterator result is not an object');
      if (step.done) return false;
      if (visit(step.value)) {
        closeIterator(iterator);
        return true;
      }
    }
  }

  function copySet(set) {
    const copy = new $Set();
    const elements = elementsOf(set);
    for (let index = 0; index < elements.length; index++) setAdd(copy, elements[index]);
    return copy;
  }

  const setMethods = {
    union(other) {
      setSize(this);
      const record = setRecord(other);
      const result = copySet(this);
      someKey(record, (key) => void setAdd(result, key));
      return result;
    },
    intersection(other) {
      const size = setSize(this);
      const record = setRecord(other);
      const result = new $Set();
      if (size <= record.size) {
        const elements = elementsOf(this);
        for (let index = 0; index < elements.length; index++) {
          if (recordHas(record, elements[index])) setAdd(result, elements[index]);
        }
      } else {
        someKey(record, (key) => void (setHas(this, key) && setAdd(result, key)));
      }
      return result;
    },
    difference(other) {
      const size = setSize(this);
      const record = setRecord(other);
      const result = copySet(this);
      if (size <= record.size) {
        const elements = elementsOf(this);
        for (let index = 0; index < elements.length; index++) {
          if (recordHas(record, elements[index])) setDelete(result, elements[index]);
        }
      } else {
        someKey(record, (key) => void setDelete(result, key));
      }
      return result;
    },
    symmetricDifference(other) {
      setSize(this);
      const record = setRecord(other);
      const result = copySet(this);
      someKey(record, (key) => {
        if (setHas(this, key)) setDelete(result, key);
        else setAdd(result, key);
      });
      return result;
    },
    isSubsetOf(other) {
      const size = setSize(this);
      const record = setRecord(other);
      if (size > record.size) return false;
      const elements = elementsOf(this);
      for (let index = 0; index < elements.length; index++) {
        if (!recordHas(record, elements[index])) return false;
      }
      return true;
    },
    isSupersetOf(other) {
      const size = setSize(this);
      const record = setRecord(other);
      if (size < record.size) return false;
      return !someKey(record, (key) => !setHas(this, key));
    },
    isDisjointFrom(other) {
      const size = setSize(this);
      const record = setRecord(other);
      if (size <= record.size) {
        const elements = elementsOf(this);
        for (let index = 0; index < elements.length; index++) {
          if (recordHas(record, elements[index])) return false;
        }
        return true;
      }
      return !someKey(record, (key) => setHas(this, key));
    },
  };
  for (const name of ['union', 'intersection', 'difference', 'symmetricDifference', 'isSubsetOf',
    'isSupersetOf', 'isDisjointFrom']) {
    definePolyfill($Set.prototype, name, setMethods[name]);
  }

  const promiseMethods = {
    try(callback, ...args) {
      if (!isObject(this)) throw new $TypeError('Promise.try called on a non-object');
      return new this((resolve, reject) => {
        try {
          resolve(reflectApply(callback, undefined, args));
        } catch (error) {
          reject(error);
        }
      });
    },
  };
  definePolyfill($Promise, 'try', promiseMethods.try);

  // RegExp.escape: as EncodeForRegExpEscape says, with lowercase hexadecimal escapes.
  const regExpSyntax = '^$\\.*+?()[]{}|/';
  const regExpControls = { 9: 't', 10: 'n', 11: 'v', 12: 'f', 13: 'r' };
  const regExpOtherPunctuators = ',-=<>#&!%:;@~\'`"';
  function isWhiteSpaceOrLineTerminator(code) {
    return code === 0x20 || code === 0xa0 || code === 0x1680 || (code >= 0x2000 && code <= 0x200a)
      || code === 0x2028 || code === 0x2029 || code === 0x202f || code === 0x205f
      || code === 0x3000 || code === 0xfeff || (code >= 0x09 && code <= 0x0d);
  }
  const hex = (code, width) => stringPadStart(numberToString(code, 16), width, '0');
  definePolyfill($RegExp, 'escape', function escape(string) {
    if (typeof string !== 'string') throw new $TypeError('RegExp.escape requires a string');
    let escaped = '';
    for (let index = 0; index < string.length; index++) {
      const code = codePointAt(string, index);
      const character = code > 0xffff ? string[index] + string[index + 1] : string[index];
      if (code > 0xffff) index++;
      if (escaped === '' && ((code >= 0x30 && code <= 0x39) || ((code | 0x20) >= 0x61 && (code | 0x20) <= 0x7a))) {
        escaped += '\\x' + hex(code, 2);
      } else if (stringIncludes(regExpSyntax, character)) {
        escaped += '\\' + character;
      } else if (regExpControls[code] !== undefined) {
        escaped += '\\' + regExpControls[code];
      } else if (stringIncludes(regExpOtherPunctuators, character) || isWhiteSpaceOrLineTerminator(code)
        || (code >= 0xd800 && code <= 0xdfff)) {
        escaped += code <= 0xff ? '\\x' + hex(code, 2) : '\\u' + hex(code, 4);
      } else {
        escaped += character;
      }
    }
    return escaped;
  });

  function thisString(value, method) {
    if (value === null || value === undefined) {
      throw new $TypeError('String.prototype.' + method + ' called on null or undefined');
    }
    return $String(value);
  }
  // The index of the first lone surrogate in `string`, or -1.
  function loneSurrogate(string, from) {
    for (let index = from; index < string.length; index++) {
      const unit = charCodeAt(string, index);
      if (unit >= 0xd800 && unit <= 0xdbff) {
        const next = charCodeAt(string, index + 1);
        if (next >= 0xdc00 && next <= 0xdfff) index++;
        else return index;
      } else if (unit >= 0xdc00 && unit <= 0xdfff) {
        return index;
      }
    }
    return -1;
  }
  definePolyfill($String.prototype, 'isWellFormed', function isWellFormed() {
    return loneSurrogate(thisString(this, 'isWellFormed'), 0) === -1;
  });
  definePolyfill($String.prototype, 'toWellFormed', function toWellFormed() {
    const string = thisString(this, 'toWellFormed');
    let result = '';
    let from = 0;
    for (let lone = loneSurrogate(string, 0); lone !== -1; lone = loneSurrogate(string, from)) {
      result += string.slice(from, lone) + fromCharCode(0xfffd);
      from = lone + 1;
    }
    return from === 0 ? string : result + string.slice(from);
  });

  // ---- iterator helpers: Iterator, Iterator.from and the methods of %IteratorPrototype% ----

  const IteratorPrototype = getPrototypeOf(getPrototypeOf([][$Symbol.iterator]()));
  const DONE = $Symbol('done');

  function closeIterator(iterator) {
    const method = iterator.return;
    if (method === undefined || method === null) return;
    const result = reflectApply(method, iterator, []);
    if (!isObject(result)) throw new $TypeError('An iterator result is not an object');
  }

  // Closes `iterator` because of `error`, then throws `error` (whatever closing did).
  function closeAndThrow(iterator, error) {
    try {
      const method = iterator.return;
      if (method !== undefined && method !== null) reflectApply(method, iterator, []);
    } catch {
      // The first error is the one that counts.
    }
    throw error;
  }

  function directRecord(iterator, method) {
    if (!isObject(iterator)) throw new $TypeError('Iterator.prototype.' + method + ' called on a non-object');
    return { iterator, next: iterator.next };
  }

  // The next value of `record`, or DONE.
  function stepValue(record) {
    const result = reflectApply(record.next, record.iterator, []);
    if (!isObject(result)) throw new $TypeError('An iterator result is not an object');
    return result.done ? DONE : result.value;
  }

  function callableOrClose(record, fn, method) {
    if (typeof fn !== 'function') {
      closeAndThrow(record.iterator, new $TypeError('Iterator.prototype.' + method + ': the argument is not a function'));
    }
  }

  function limitOf(record, limit, method) {
    const number = $Number(limit);
    if (number !== number) {
      closeAndThrow(record.iterator, new $RangeError('Iterator.prototype.' + method + ': the limit is not a number'));
    }
    const integer = toIntegerOrInfinity(number);
    if (integer < 0) {
      closeAndThrow(record.iterator, new $RangeError('Iterator.prototype.' + method + ': the limit is negative'));
    }
    return integer;
  }

  // The state behind each helper object; helpers are plain objects of %IteratorHelperPrototype%.
  const helperStates = new $WeakMap();
  const IteratorHelperPrototype = objectCreate(IteratorPrototype);
  function helperState(helper) {
    const state = isObject(helper) ? weakMapGet(helperStates, helper) : undefined;
    if (state === undefined) throw new $TypeError('Not an iterator helper');
    if (state.running) throw new $TypeError('Generator is already running');
    return state;
  }
  const helperMethods = {
    next() {
      const state = helperState(this);
      if (state.done) return { value: undefined, done: true };
      state.running = true;
      try {
        const value = state.step();
        if (value === DONE) {
          state.done = true;
          return { value: undefined, done: true };
        }
        return { value, done: false };
      } catch (error) {
        state.done = true;
        throw error;
      } finally {
        state.running = false;
      }
    },
    return() {
      const state = helperState(this);
      if (state.done) return { value: undefined, done: true };
      state.done = true;
      if (state.inner !== undefined) {
        try {
          closeIterator(state.inner.iterator);
        } catch (error) {
          closeAndThrow(state.record.iterator, error);
        }
      }
      closeIterator(state.record.iterator);
      return { value: undefined, done: true };
    },
  };
  defineProperty(IteratorHelperPrototype, 'next', { value: helperMethods.next, writable: true, configurable: true });
  defineProperty(IteratorHelperPrototype, 'return', { value: helperMethods.return, writable: true, configurable: true });
  defineProperty(IteratorHelperPrototype, $Symbol.toStringTag, { value: 'Iterator Helper', configurable: true });

  function helper(record, step) {
    const object = objectCreate(IteratorHelperPrototype);
    const state = { record, step: undefined, done: false, running: false, inner: undefined };
    state.step = () => step(state);
    weakMapSet(helperStates, object, state);
    return object;
  }

  // Calls `fn` for a value of `record`, closing the iterator when it throws.
  function guarded(record, fn, args) {
    try {
      return reflectApply(fn, undefined, args);
    } catch (error) {
      return closeAndThrow(record.iterator, error);
    }
  }

  // GetIteratorFlattenable: an iterator from what flatMap's mapper or Iterator.from received.
  function flattenable(value, strings) {
    if (!isObject(value) && !(strings && typeof value === 'string')) {
      throw new $TypeError('The value is not an iterator or an iterable');
    }
    const method = value[$Symbol.iterator];
    const iterator = method === undefined || method === null ? value : reflectApply(method, value, []);
    if (!isObject(iterator)) throw new $TypeError('The value is not an iterator or an iterable');
    return { iterator, next: iterator.next };
  }

  // The first value of `iterator` whose predicate's truth is `wanted` (the iterator is closed
  // there), or DONE: what some, every and find share.
  function firstWhere(iterator, predicate, method, wanted) {
    const record = directRecord(iterator, method);
    callableOrClose(record, predicate, method);
    let counter = 0;
    for (let value = stepValue(record); value !== DONE; value = stepValue(record)) {
      if (!guarded(record, predicate, [value, counter++]) === !wanted) {
        closeIterator(record.iterator);
        return value;
      }
    }
    return DONE;
  }

  const iteratorMethods = {
    map(mapper) {
      const record = directRecord(this, 'map');
      callableOrClose(record, mapper, 'map');
      let counter = 0;
      return helper(record, () => {
        const value = stepValue(record);
        return value === DONE ? DONE : guarded(record, mapper, [value, counter++]);
      });
    },
    filter(predicate) {
      const record = directRecord(this, 'filter');
      callableOrClose(record, predicate, 'filter');
      let counter = 0;
      return helper(record, () => {
        for (;;) {
          const value = stepValue(record);
          if (value === DONE) return DONE;
          if (guarded(record, predicate, [value, counter++])) return value;
        }
      });
    },
    take(limit) {
      const record = directRecord(this, 'take');
      let remaining = limitOf(record, limit, 'take');
      return helper(record, () => {
        if (remaining === 0) {
          closeIterator(record.iterator);
          return DONE;
        }
        if (remaining !== Infinity) remaining--;
        return stepValue(record);
      });
    },
    drop(limit) {
      const record = directRecord(this, 'drop');
      let remaining = limitOf(record, limit, 'drop');
      return helper(record, () => {
        for (; remaining > 0; remaining--) {
          if (stepValue(record) === DONE) return DONE;
        }
        return stepValue(record);
      });
    },
    flatMap(mapper) {
      const record = directRecord(this, 'flatMap');
      callableOrClose(record, mapper, 'flatMap');
      let counter = 0;
      return helper(record, (state) => {
        for (;;) {
          if (state.inner !== undefined) {
            let value;
            try {
              value = stepValue(state.inner);
            } catch (error) {
              closeAndThrow(record.iterator, error);
            }
            if (value !== DONE) return value;
            state.inner = undefined;
          }
          const value = stepValue(record);
          if (value === DONE) return DONE;
          const mapped = guarded(record, mapper, [value, counter++]);
          try {
            state.inner = flattenable(mapped, false);
          } catch (error) {
            closeAndThrow(record.iterator, error);
          }
        }
      });
    },
    reduce(reducer, ...initial) {
      const record = directRecord(this, 'reduce');
      callableOrClose(record, reducer, 'reduce');
      let accumulator;
      let counter = 0;
      if (initial.length === 0) {
        accumulator = stepValue(record);
        if (accumulator === DONE) throw new $TypeError('Reduce of empty iterator with no initial value');
        counter = 1;
      } else {
        accumulator = initial[0];
      }
      for (;;) {
        const value = stepValue(record);
        if (value === DONE) return accumulator;
        accumulator = guarded(record, reducer, [accumulator, value, counter++]);
      }
    },
    toArray() {
      const record = directRecord(this, 'toArray');
      const values = [];
      for (let value = stepValue(record); value !== DONE; value = stepValue(record)) arrayPush(values, value);
      return values;
    },
    forEach(fn) {
      const record = directRecord(this, 'forEach');
      callableOrClose(record, fn, 'forEach');
      let counter = 0;
      for (let value = stepValue(record); value !== DONE; value = stepValue(record)) {
        guarded(record, fn, [value, counter++]);
      }
    },
    some(predicate) {
      return firstWhere(this, predicate, 'some', true) !== DONE;
    },
    every(predicate) {
      return firstWhere(this, predicate, 'every', false) === DONE;
    },
    find(predicate) {
      const found = firstWhere(this, predicate, 'find', true);
      return found === DONE ? undefined : found;
    },
  };
  for (const name of ['map', 'filter', 'take', 'drop', 'flatMap', 'reduce', 'toArray', 'forEach',
    'some', 'every', 'find']) {
    definePolyfill(IteratorPrototype, name, iteratorMethods[name]);
  }

  if (definesPolyfills && !('Iterator' in global)) {
    const Iterator = function Iterator() {
      if (new.target === undefined || new.target === Iterator) {
        throw new $TypeError('Abstract class Iterator not directly constructable');
      }
    };
    defineProperty(Iterator, 'prototype', { value: IteratorPrototype, writable: false, enumerable: false, configurable: false });
    definePolyfill(IteratorPrototype, 'constructor', Iterator);
    definePolyfill(IteratorPrototype, $Symbol.toStringTag, 'Iterator');
    // Iterator.from's wrapper for an iterator that does not inherit from Iterator.prototype.
    const wrapped = new $WeakMap();
    const WrapPrototype = objectCreate(IteratorPrototype);
    defineProperty(WrapPrototype, 'next', {
      value: function next() {
        const record = isObject(this) ? weakMapGet(wrapped, this) : undefined;
        if (record === undefined) throw new $TypeError('Not an iterator made by Iterator.from');
        return reflectApply(record.next, record.iterator, []);
      },
      writable: true,
      configurable: true,
    });
    defineProperty(WrapPrototype, 'return', {
      value: function () {
        const record = isObject(this) ? weakMapGet(wrapped, this) : undefined;
        if (record === undefined) throw new $TypeError('Not an iterator made by Iterator.from');
        const method = record.iterator.return;
        if (method === undefined || method === null) return { value: undefined, done: true };
        return reflectApply(method, record.iterator, []);
      },
      writable: true,
      configurable: true,
    });
    definePolyfill(Iterator, 'from', function from(value) {
      const record = flattenable(value, true);
      let prototype = getPrototypeOf(record.iterator);
      for (; prototype !== null; prototype = getPrototypeOf(prototype)) {
        if (prototype === IteratorPrototype) return record.iterator;
      }
      const wrapper = objectCreate(WrapPrototype);
      weakMapSet(wrapped, wrapper, record);
      return wrapper;
    });
    defineGlobal('Iterator', Iterator);
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
