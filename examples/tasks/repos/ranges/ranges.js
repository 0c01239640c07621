// Sum of the integers 1..n inclusive.
export function sumTo(n) {
  let total = 0;
  for (let i = 1; i < n; i++) total += i;
  return total;
}

export function count(n) {
  return Math.max(0, n);
}
