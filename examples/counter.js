// Stored values survive across cells of a session; with --store they survive across runs too.
// Run it twice: cargo run -p codemode-cli -- run --store /tmp/codemode-store examples/counter.js
const runs = (load("runs") ?? 0) + 1;
store("runs", runs);
text(`this script has run ${runs} time${runs === 1 ? "" : "s"} with this store`);
