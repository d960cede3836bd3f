// A mistake shows where it happened, and which tool was probably meant.
// Run: cargo run -p codemode-cli -- run examples/mistake.js   (exits with status 1)
const results = [];
for (const word of ["alpha", "beta"]) {
  results.push(await tools.ecco({ word }));
}
text(results);
