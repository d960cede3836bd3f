"""The pydantic-monty yardstick of `cargo xtask bench`: a pool of Monty's subprocess workers,
measured on request so that the bench can alternate Monty's runs with codemode's.

Reads one request a line from standard input and answers each with one line of JSON:
- `round_trip N`: microseconds per external function call, from a snippet that calls one N times
  minus the same snippet calling it once (as the bench measures an awaited tool round trip);
- `fresh_session N SPACING_MS`: milliseconds, N samples SPACING_MS apart, to check a session out
  of the warm pool, run a trivial snippet in it and give it back.

Monty looks for the OpenTelemetry API at each external call; it is installed beside Monty (as
`cargo xtask bench` does), or each call measures a failing import.
"""

import json
import sys
import time

from pydantic_monty import Monty


def echo(value):
    return value


def round_trip(pool, calls):
    limits = {"max_suspensions": calls + 10}
    timings = []
    for count in (calls, 1):
        with pool.checkout(limits=limits) as session:
            began = time.perf_counter()
            session.feed_run(
                f"for i in range({count}):\n    echo(i)\n", external_lookup={"echo": echo}
            )
            timings.append(time.perf_counter() - began)
    return (timings[0] - timings[1]) * 1e6 / (calls - 1)


def fresh_session(pool, runs, spacing_ms):
    samples = []
    for _ in range(runs):
        time.sleep(spacing_ms / 1000)
        began = time.perf_counter()
        with pool.checkout() as session:
            session.feed_run("'hi'")
        samples.append((time.perf_counter() - began) * 1e3)
    return samples


def main():
    try:
        import opentelemetry  # noqa: F401
    except ImportError:
        # Monty imports it twice at each external call: a failing import walks every finder of
        # sys.path each time, and the round trip would measure that (370 µs instead of 60 µs).
        print(
            "opentelemetry-api is not installed beside pydantic-monty: its external calls will "
            "measure a failing import each (cargo xtask bench installs it)",
            file=sys.stderr,
        )
    with Monty(min_processes=2) as pool:
        fresh_session(pool, 5, 0)
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "round_trip":
                answer = round_trip(pool, int(words[1]))
            elif words[0] == "fresh_session":
                answer = fresh_session(pool, int(words[1]), float(words[2]))
            else:
                answer = {"error": f"unknown request {words[0]}"}
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
