/** At most `limit` promises in flight; `run` waits for a slot. Keeps a burst of launches from opening 100 sockets. */
export class Limiter {
  private active = 0;
  private readonly waiters: Array<() => void> = [];
  constructor(private readonly limit: number) {}

  async acquire(): Promise<void> {
    if (this.active < this.limit) {
      this.active++;
      return;
    }
    await new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  release(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.active--;
  }

  /** Resolves when nothing is in flight. */
  async idle(): Promise<void> {
    while (this.active > 0) await new Promise<void>((r) => setImmediate(r));
  }
}
