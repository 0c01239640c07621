/**
 * Exact conversion between USD decimal strings (how PostgreSQL NUMERIC(20,9) comes back) and integer nano-USD
 * (how money lives in code). Pure string/BigInt arithmetic: a float never touches a cost, so summing and
 * round-tripping is exact.
 */

/** Money evalfleet holds as integer nano-USD in a JS number: at most about $9M per amount (2^53 nano-USD). */
export const MAX_USD = 9_000_000;

const NANO_DIGITS = 9;
const NANO_PER_USD = 1_000_000_000n;
// Plain decimal or scientific notation (String(1e-7) is "1e-7", so number inputs need it).
const DECIMAL = /^([+-])?(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/;

/**
 * Parse a USD amount ("12.5", "-0.000000001", "1e-7", 3.25) to nano-USD as a BigInt. More than nine fractional
 * digits are rounded half away from zero — the same rule PostgreSQL applies when storing into NUMERIC(20,9).
 */
export function usdToNano(usd: string | number): bigint {
  if (typeof usd === "number" && !Number.isFinite(usd)) throw new RangeError(`not a finite amount: ${usd}`);
  const text = typeof usd === "number" ? String(usd) : usd.trim();
  const m = DECIMAL.exec(text);
  const [, sign, intPartRaw = "", fracPartRaw = "", expRaw] = m ?? [];
  if (!m || (intPartRaw === "" && fracPartRaw === ""))
    throw new RangeError(`not a decimal USD amount: "${text}"`);
  const exp = expRaw === undefined ? 0 : Number(expRaw);
  if (!Number.isSafeInteger(exp) || Math.abs(exp) > 400)
    throw new RangeError(`exponent out of range: "${text}"`);
  // All digits as one integer with the decimal point `point` places from the left, then shift by the exponent.
  const digits = intPartRaw + fracPartRaw;
  const point = intPartRaw.length + exp;
  // Scale to nano: we want digits * 10^(NANO_DIGITS - (digits.length - point)).
  const shift = NANO_DIGITS - (digits.length - point);
  let nano: bigint;
  if (shift >= 0) {
    nano = BigInt(digits || "0") * 10n ** BigInt(shift);
  } else {
    const cut = -shift;
    const kept = digits.length > cut ? digits.slice(0, digits.length - cut) : "0";
    const dropped = digits.length > cut ? digits.slice(digits.length - cut) : digits.padStart(cut, "0");
    nano = BigInt(kept);
    if (dropped[0] !== undefined && dropped[0] >= "5") nano += 1n;
  }
  return sign === "-" ? -nano : nano;
}

/** Nano-USD to a fixed nine-decimal USD string ("0.000001234"), ready for a NUMERIC parameter. */
export function nanoToUsd(nano: bigint | number): string {
  const n = typeof nano === "bigint" ? nano : toBigIntExact(nano);
  const neg = n < 0n;
  const abs = neg ? -n : n;
  const whole = abs / NANO_PER_USD;
  const frac = (abs % NANO_PER_USD).toString().padStart(NANO_DIGITS, "0");
  return `${neg ? "-" : ""}${whole}.${frac}`;
}

/** A BigInt nano-USD amount as a JS number, refusing (never rounding) values beyond 2^53. */
export function nanoToNumber(nano: bigint): number {
  if (nano > BigInt(Number.MAX_SAFE_INTEGER) || nano < BigInt(Number.MIN_SAFE_INTEGER)) {
    throw new RangeError(`nano-USD amount ${nano} exceeds the safe integer range`);
  }
  return Number(nano);
}

/** USD (NUMERIC string) straight to a number of nano-USD; null stays null. */
export function usdToNanoNumber(usd: string | number | null | undefined): number | null {
  if (usd === null || usd === undefined) return null;
  return nanoToNumber(usdToNano(usd));
}

function toBigIntExact(n: number): bigint {
  if (!Number.isSafeInteger(n)) throw new RangeError(`nano-USD must be a safe integer, got ${n}`);
  return BigInt(n);
}
