// Prints one pytest-style status line per test: "PASSED <id>" or "FAILED <id>".
import { add, sub } from "./calc.js";

const tests = {
  "test.js::add_positive": () => add(2, 3) === 5,
  "test.js::add_negative": () => add(-2, -3) === -5,
  "test.js::sub_basic": () => sub(5, 3) === 2,
};
let failed = 0;
for (const [id, fn] of Object.entries(tests)) {
  let ok = false;
  try { ok = fn(); } catch { ok = false; }
  if (!ok) failed++;
  console.log(`${ok ? "PASSED" : "FAILED"} ${id}`);
}
process.exitCode = failed ? 1 : 0;
