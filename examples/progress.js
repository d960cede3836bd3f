// notify() sends progress at once (to stderr here, as progress notifications over MCP);
// yield_control() hands the output so far to the observer while the script keeps running.
// Run: cargo run -p codemode-cli -- run examples/progress.js
for (let step = 1; step <= 3; step++) {
  await tools.sleep({ ms: 100 });
  notify(`step ${step} of 3 done`);
  text(`step ${step}`);
  yield_control();
}
text("all steps done");
