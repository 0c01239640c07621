// String helpers.
export function title(s) {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

export function shout(s) {
  return `${s.toUpperCase()}!`;
}
