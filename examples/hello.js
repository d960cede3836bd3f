// A first cell: tools, a loop, a stored value, an image.
const greeting = await tools.echo({ message: "hello from a cell" });
text(greeting.message);

for (const ms of [10, 20, 30]) {
  await tools.sleep({ ms });
  text(`slept ${ms} ms`);
}

store("visits", (load("visits") ?? 0) + 1);
text({ visits: load("visits"), sorted: [3, 1, 2].toSorted() });

// A 1x1 PNG, as a data URL.
image("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==", "low");
