// Tool calls run in parallel with Promise.all: three 200 ms sleeps take about 200 ms, not 600.
// Run: cargo run -p codemode-cli -- run examples/parallel.js
const started = Date.now();
await Promise.all([200, 200, 200].map((ms) => tools.sleep({ ms })));
text(`three sleeps of 200 ms in parallel took ${Date.now() - started} ms`);
const echoed = await Promise.all(["a", "b", "c"].map((letter) => tools.echo({ letter })));
text(echoed.map((item) => item.letter).toSorted().toReversed());
