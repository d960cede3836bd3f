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
// the language (both engines have today's natively: the conformance suite holds them to it),
// but guards three (split, match, JSON.parse) against strings too long for V8's arrays.
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

  // ---- built-ins whose result the engine cannot hold ----

  // V8 ends its whole process ("Fatal JavaScript invalid size error") when a global match, a
  // split or JSON.parse would make an array longer than it can hold (config.longestArray:
  // 134,217,725 elements, its FixedArray::kMaxLength), which only a string at least that long
  // can ask for. For such a
  // string a global match and a split build their result here, element by element, exactly as
  // the language says, so that the heap limit ends the cell as it ends any other allocation; a
  // JSON text that long throws a RangeError that says so. Shorter strings, the common case, take
  // the built-in itself after one length comparison. (QuickJS has no such limit: its engine
  // gives no longestArray, and its built-ins stay as they are.)
  const LONGEST_ARRAY = config.longestArray;
  const $RegExp = RegExp;
  const nativeSplit = String.prototype.split;
  const nativeMatch = String.prototype.match;
  const nativeRegExpMatch = RegExp.prototype[Symbol.match];
  const nativeRegExpSplit = RegExp.prototype[Symbol.split];
  const symbolSplit = $Symbol.split;
  const symbolMatch = $Symbol.match;
  const stringPrototype = String.prototype;
  const stringIndexOf = uncurry(String.prototype.indexOf);
  const stringSlice = uncurry(String.prototype.slice);
  const stringCharCodeAt = uncurry(String.prototype.charCodeAt);
  const regExpFlags = uncurry(Object.getOwnPropertyDescriptor(RegExp.prototype, 'flags').get);
  const isRegExp = (value) => {
    try {
      regExpFlags(value);
      return typeof value === 'object' && value !== null && value instanceof $RegExp;
    } catch {
      return false;
    }
  };
  const toLength = (value) => {
    const number = $Number(value);
    if (!(number > 0)) return 0;
    return $Math.min($Math.floor(number), 2 ** 53 - 1);
  };
  // AdvanceStringIndex: past a surrogate pair in unicode mode.
  const advance = (string, index, unicode) => {
    if (!unicode || index + 1 >= string.length) return index + 1;
    const first = stringCharCodeAt(string, index);
    const second = stringCharCodeAt(string, index + 1);
    const pair = first >= 0xd800 && first <= 0xdbff && second >= 0xdc00 && second <= 0xdfff;
    return index + (pair ? 2 : 1);
  };
  // RegExpExec: the regular expression's own `exec`.
  const regExpExec = (regexp, string) => {
    const exec = regexp.exec;
    const result = reflectApply(exec, regexp, [string]);
    if (result !== null && (typeof result !== 'object' || result === undefined)) {
      throw new $TypeError('exec must return an object or null');
    }
    return result;
  };
  // String.prototype.split on a string this long, by a string or a regular expression.
  function splitLong(string, separator, limit) {
    const most = limit === undefined ? 2 ** 32 - 1 : limit >>> 0;
    const pieces = [];
    if (most === 0) return pieces;
    if (typeof separator === 'string') {
      if (separator === '') {
        for (let i = 0; i < string.length && pieces.length < most; i++) {
          arrayPush(pieces, stringSlice(string, i, i + 1));
        }
        return pieces;
      }
      let from = 0;
      for (let at = stringIndexOf(string, separator, 0); at !== -1; at = stringIndexOf(string, separator, from)) {
        arrayPush(pieces, stringSlice(string, from, at));
        if (pieces.length === most) return pieces;
        from = at + separator.length;
      }
      arrayPush(pieces, stringSlice(string, from));
      return pieces;
    }
    // RegExp.prototype[Symbol.split], with a sticky copy of the expression.
    const flags = $String(separator.flags);
    const unicode = stringIncludes(flags, 'u') || stringIncludes(flags, 'v');
    const splitter = new $RegExp(separator, stringIncludes(flags, 'y') ? flags : flags + 'y');
    let from = 0;
    let at = 0;
    while (at < string.length) {
      splitter.lastIndex = at;
      const match = regExpExec(splitter, string);
      if (match === null) {
        at = advance(string, at, unicode);
        continue;
      }
      const end = $Math.min(toLength(splitter.lastIndex), string.length);
      if (end === from) {
        at = advance(string, at, unicode);
        continue;
      }
      arrayPush(pieces, stringSlice(string, from, at));
      if (pieces.length === most) return pieces;
      from = end;
      const captures = $Math.max(toLength(match.length) - 1, 0);
      for (let i = 1; i <= captures; i++) {
        arrayPush(pieces, match[i]);
        if (pieces.length === most) return pieces;
      }
      at = from;
    }
    arrayPush(pieces, stringSlice(string, from));
    return pieces;
  }
  // RegExp.prototype[Symbol.match] of a global expression on a string this long.
  function matchAllLong(regexp, string) {
    const flags = $String(regexp.flags);
    const unicode = stringIncludes(flags, 'u') || stringIncludes(flags, 'v');
    regexp.lastIndex = 0;
    const found = [];
    for (;;) {
      const match = regExpExec(regexp, string);
      if (match === null) return found.length === 0 ? null : found;
      const text = $String(match[0]);
      arrayPush(found, text);
      if (text === '') regexp.lastIndex = advance(string, toLength(regexp.lastIndex), unicode);
    }
  }
  const longStringBuiltIns = {
    split(separator, limit) {
      if (typeof this === 'string' && this.length >= LONGEST_ARRAY) {
        if (typeof separator === 'string' && stringPrototype[symbolSplit] === undefined) {
          return splitLong(this, separator, limit);
        }
        if (isRegExp(separator) && separator[symbolSplit] === nativeRegExpSplit) {
          return splitLong(this, separator, limit);
        }
      }
      return reflectApply(nativeSplit, this, arguments);
    },
    match(regexp) {
      if (
        typeof this === 'string' &&
        this.length >= LONGEST_ARRAY &&
        isRegExp(regexp) &&
        regexp[symbolMatch] === nativeRegExpMatch &&
        stringIncludes($String(regexp.flags), 'g')
      ) {
        return matchAllLong(regexp, this);
      }
      return reflectApply(nativeMatch, this, arguments);
    },
    parse(text, reviver) {
      if (typeof text === 'string' && text.length >= LONGEST_ARRAY) {
        throw new $RangeError(
          `JSON.parse: a text of ${text.length} characters could make an array or object larger ` +
            `than the engine can hold (${LONGEST_ARRAY} elements); parse it in smaller pieces`,
        );
      }
      return reflectApply(jsonParse, JSON, arguments);
    },
  };
  const replaceMethod = (owner, name) => {
    defineProperty(owner, name, {
      value: longStringBuiltIns[name],
      writable: true,
      enumerable: false,
      configurable: true,
    });
  };
  if (LONGEST_ARRAY !== undefined) {
    replaceMethod(stringPrototype, 'split');
    replaceMethod(stringPrototype, 'match');
    replaceMethod(JSON, 'parse');
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
