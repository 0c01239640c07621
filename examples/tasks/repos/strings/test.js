// Prints one pytest-style status line per test: "PASSED <id>" or "FAILED <id>".
import { shout, title } from "./strings.js";

const tests = {
  "test.js::title_one_word": () => title("hello") === "Hello",
  "test.js::title_many_words": () => title("hello big world") === "Hello Big World",
  "test.js::shout": () => shout("hi") === "HI!",
};
let failed = 0;
for (const [id, fn] of Object.entries(tests)) {
  let ok = false;
  try { ok = fn(); } catch { ok = false; }
  if (!ok) failed++;
  console.log(`${ok ? "PASSED" : "FAILED"} ${id}`);
}
process.exitCode = failed ? 1 : 0;
