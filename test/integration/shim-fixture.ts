import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { ensureTopology } from "../../plane/topology.js";
import { decodeJson } from "../../protocol/decode.js";
import {
  type CellProgress,
  CellProgressSchema,
  type LedgerCall,
  LedgerCallSchema,
} from "../../protocol/messages.js";
import { ProgressKeys, Subjects } from "../../protocol/subjects.js";
import { Buckets, Streams } from "../../protocol/topology.js";
import {
  type ScriptedProvider,
  type ScriptedProviderOptions,
  startScriptedProvider,
} from "../../scripted-provider/index.js";
import { type ShimHandle, type ShimOptions, startShim } from "../../shim/index.js";
import { startNats, type TestNats } from "../helpers/nats.js";

export const RUN_KEY = "sk-run-0123456789abcdef";

/** NATS with the topology, a scripted provider that accepts only the run key, and a shim in front of it. */
export interface Rig {
  nats: TestNats;
  nc: NatsConnection;
  provider: ScriptedProvider;
  shim: ShimHandle;
  close(): Promise<void>;
}

export async function startRig(
  shimOpts: Partial<ShimOptions> = {},
  providerOpts: ScriptedProviderOptions = {},
): Promise<Rig> {
  const nats = await startNats();
  const nc = await nats.connect("shim-test");
  await ensureShimTopology(nc);
  const provider = await startScriptedProvider({ keys: [RUN_KEY], ...providerOpts });
  const shim = await startShim({
    upstream: provider.url,
    run: "run1",
    cell: "cell1",
    attempt: 1,
    providerKey: RUN_KEY,
    nc,
    retry: { baseDelayMs: 5, maxDelayMs: 50 },
    progressIntervalMs: 20,
    ...shimOpts,
  });
  return {
    nats,
    nc,
    provider,
    shim,
    async close() {
      await shim.close();
      await provider.close();
      await nats.cleanup();
    },
  };
}

/**
 * ensureTopology, working around its consumer-not-found check (it reads `api_error.err_code`; @nats-io/jetstream 3
 * throws ConsumerNotFoundError with the code on `err.code`): create the consumers, then let it verify everything.
 */
/** The plane's topology on a test server (ensureTopology is idempotent). */
export async function ensureShimTopology(nc: NatsConnection): Promise<void> {
  await ensureTopology(nc, await jetstreamManager(nc));
}

/** Every ledger message of a run, read back from the stream. */
export async function readLedger(nc: NatsConnection, run: string): Promise<LedgerCall[]> {
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(Streams.ledger.name);
  const n = info.state.messages;
  if (n === 0) return [];
  const c = await js.consumers.get(Streams.ledger.name, { filter_subjects: Subjects.ledger.run(run) });
  const out: LedgerCall[] = [];
  while (out.length < n) {
    const batch = await c.fetch({ max_messages: n - out.length, expires: 1_000 });
    let got = 0;
    for await (const m of batch) {
      out.push(decodeJson(LedgerCallSchema, m.data, "ledger"));
      got++;
    }
    if (got === 0) break;
  }
  return out;
}

export async function readProgress(
  nc: NatsConnection,
  run: string,
  cell: string,
): Promise<CellProgress | undefined> {
  const kv = await new Kvm(nc).open(Buckets.progress.name);
  const e = await kv.get(ProgressKeys.cell(run, cell));
  return e?.value && e.value.length > 0 ? decodeJson(CellProgressSchema, e.value, "progress") : undefined;
}

export function sum(rows: readonly LedgerCall[], f: (r: LedgerCall) => number): number {
  return rows.reduce((a, r) => a + f(r), 0);
}
