// Prints one pytest-style status line per test: "PASSED <id>" or "FAILED <id>".
import { count, sumTo } from "./ranges.js";

const tests = {
  "test.js::sum_to_ten": () => sumTo(10) === 55,
  "test.js::sum_to_one": () => sumTo(1) === 1,
  "test.js::count_negative": () => count(-3) === 0,
};
let failed = 0;
for (const [id, fn] of Object.entries(tests)) {
  let ok = false;
  try { ok = fn(); } catch { ok = false; }
  if (!ok) failed++;
  console.log(`${ok ? "PASSED" : "FAILED"} ${id}`);
}
process.exitCode = failed ? 1 : 0;
