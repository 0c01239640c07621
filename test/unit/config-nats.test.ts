import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { loadNatsSettings, SettingsError } from "../../config/index.js";

const dir = mkdtempSync(join(tmpdir(), "ef-config-nats-"));
const file = (name: string, text = "x") => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};
const load = (env: Record<string, string>) => loadNatsSettings({ env });
function problems(env: Record<string, string>): { path: string; reason: string }[] {
  try {
    load(env);
  } catch (err) {
    assert.ok(err instanceof SettingsError, String(err));
    assert.equal(err.code, "EF_INVALID_CONFIG");
    return err.issues;
  }
  assert.fail("expected the settings to be refused");
}

test("defaults to the local server with no credentials", () => {
  assert.deepEqual(load({}), {
    servers: ["nats://127.0.0.1:4222"],
    configured: false,
    auth: { kind: "none" },
  });
  assert.equal(load({ NATS_URL: "nats://127.0.0.1:4222" }).configured, true);
  assert.deepEqual(load({ NATS_URL: "" }).servers, ["nats://127.0.0.1:4222"], "empty counts as unset");
});

test("NATS_URL is a comma-separated server list", () => {
  assert.deepEqual(load({ NATS_URL: "nats://a:4222, nats://b:4222,,c:4222" }).servers, [
    "nats://a:4222",
    "nats://b:4222",
    "c:4222",
  ]);
  const [p] = problems({ NATS_URL: "http://x y" });
  assert.equal(p?.path, "NATS_URL");
  assert.match(p!.reason, /nats:\/\/host:port/);
  assert.match(p!.reason, /got "http:\/\/x y"/);
});

test("every credential kind becomes its own auth shape", () => {
  const creds = file("u.creds");
  const seed = file("u.nk");
  assert.deepEqual(load({ NATS_CREDS: creds }).auth, { kind: "creds", file: creds });
  assert.deepEqual(load({ NATS_NKEY: seed }).auth, { kind: "nkey", seedFile: seed });
  const s = `SU${"A".repeat(56)}`;
  assert.deepEqual(load({ NATS_NKEY_SEED: s }).auth, { kind: "nkey-seed", seed: s });
  assert.deepEqual(load({ NATS_USER: "actors", NATS_PASSWORD: "pw-123456" }).auth, {
    kind: "userpass",
    user: "actors",
    pass: "pw-123456",
  });
  assert.deepEqual(load({ NATS_TOKEN: "tok-abcdef" }).auth, { kind: "token", token: "tok-abcdef" });
});

test("two credential kinds, or half a pair, are refused with each variable named", () => {
  const [p] = problems({ NATS_TOKEN: "tok-abcdef", NATS_USER: "u", NATS_PASSWORD: "pw-123456" });
  assert.match(p!.path, /NATS_USER/);
  assert.match(p!.path, /NATS_TOKEN/);
  assert.match(p!.reason, /exactly one/);
  assert.deepEqual(
    problems({ NATS_USER: "u" }).map((i) => i.path),
    ["NATS_PASSWORD"],
  );
  assert.deepEqual(
    problems({ NATS_PASSWORD: "pw-123456" }).map((i) => i.path),
    ["NATS_USER"],
  );
});

test("a secret never appears in a refusal", () => {
  const secret = "SXnotaseedbutsecret0123456789";
  const issues = problems({ NATS_NKEY_SEED: secret, NATS_URL: "bad url" });
  assert.equal(issues.length, 2, "every problem at once");
  assert.ok(!JSON.stringify(issues).includes(secret));
});

test("files named by settings must exist and be readable", () => {
  const issues = problems({ NATS_CREDS: join(dir, "missing.creds"), NATS_TLS_CA: dir });
  assert.deepEqual(issues.map((i) => i.path).sort(), ["NATS_CREDS", "NATS_TLS_CA"]);
  assert.match(issues.find((i) => i.path === "NATS_CREDS")!.reason, /does not exist/);
  assert.match(issues.find((i) => i.path === "NATS_TLS_CA")!.reason, /not a file/);
});

test("TLS: any TLS file or a tls:// server turns it on; a certificate needs its key", () => {
  const ca = file("ca.pem");
  const cert = file("c.pem");
  const key = file("k.pem");
  assert.deepEqual(load({ NATS_TLS_CA: ca }).tls, { caFile: ca });
  assert.deepEqual(load({ NATS_URL: "tls://n:4222" }).tls, {});
  assert.deepEqual(load({ NATS_TLS_CERT: cert, NATS_TLS_KEY: key }).tls, { certFile: cert, keyFile: key });
  assert.equal(load({}).tls, undefined);
  assert.deepEqual(
    problems({ NATS_TLS_CERT: cert }).map((i) => i.path),
    ["NATS_TLS_KEY"],
  );
});
