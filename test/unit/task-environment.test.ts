/**
 * What a local task inherits from its dispatcher (actors/dispatcher/backends/local.ts `taskEnvironment`) and what
 * the dispatcher's settings hand it (config `taskEnv`): where NATS is, never how the dispatcher logs in to it —
 * the task gets its own attempt's NATS user on stdin — nor the database, provider keys, the judge's key, a run
 * key or cloud credentials.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { taskEnvironment } from "../../actors/dispatcher/backends/local.js";
import { natsAt, taskEnv } from "../../config/index.js";

const dispatcherEnv: NodeJS.ProcessEnv = {
  PATH: "/usr/bin",
  HOME: "/home/ef",
  LANG: "C.UTF-8",
  NATS_URL: "nats://10.0.0.1:4222",
  NATS_TLS_CA: "/etc/nats/ca.pem",
  NATS_CREDS: "/etc/evalfleet/plane.creds",
  NATS_JWT: "eyJhbGciOi.plane.jwt",
  NATS_NKEY_SEED: "SUAPLANESEED",
  NATS_NKEY: "/etc/evalfleet/plane.nk",
  NATS_USER: "dispatcher",
  NATS_PASSWORD: "nats-pw",
  NATS_TOKEN: "nats-token",
  NATS_ACCOUNT: "AACCOUNT",
  NATS_SIGNING_KEY: "SASIGNINGSEED",
  NATS_TLS_CERT: "/etc/nats/client.pem",
  NATS_TLS_KEY: "/etc/nats/client.key",
  DOCKER_HOST: "unix:///run/docker.sock",
  EVALFLEET_WORKDIR: "/var/ef/work",
  EVALFLEET_LOG_LEVEL: "info",
  EVALFLEET_JUDGE_KEY: "efk-judge",
  EVALFLEET_RUN_KEY: "efk-run",
  DATABASE_URL: "postgres://u:p@db/ef",
  PGPASSWORD: "pg-pw",
  ANTHROPIC_API_KEY: "sk-ant-x",
  OPENAI_API_KEY: "sk-openai-x",
  AWS_SECRET_ACCESS_KEY: "aws-secret",
  AWS_ACCESS_KEY_ID: "AKIAX",
  GITHUB_TOKEN: "ghp-x",
};

test("a task inherits where NATS is and its runtime, never a credential of the dispatcher's", () => {
  const env = taskEnvironment(dispatcherEnv);
  assert.deepEqual(Object.keys(env).sort(), [
    "DOCKER_HOST",
    "EVALFLEET_LOG_LEVEL",
    "EVALFLEET_WORKDIR",
    "HOME",
    "LANG",
    "NATS_TLS_CA",
    "NATS_URL",
    "PATH",
  ]);
  const text = JSON.stringify(env);
  for (const secret of [
    "plane.creds",
    "plane.jwt",
    "SUAPLANESEED",
    "nats-pw",
    "nats-token",
    "SASIGNINGSEED",
    "client.key",
    "efk-judge",
    "efk-run",
    "pg-pw",
    "sk-ant-x",
    "aws-secret",
  ])
    assert.ok(!text.includes(secret), `${secret} reaches the task`);
});

test("the dispatcher's settings hand a task the servers and TLS CA, not its credential or signing key", () => {
  const env = taskEnv({
    nats: {
      ...natsAt(["nats://a:4222", "nats://b:4222"], {
        auth: { kind: "creds", file: "/etc/evalfleet/plane.creds" },
        signer: { account: "AACCOUNT", signingSeed: "SASIGNINGSEED" },
      }),
      tls: { caFile: "/etc/nats/ca.pem", certFile: "/etc/nats/client.pem", keyFile: "/etc/nats/client.key" },
    },
    gatewayUrl: "http://gw:8787",
  });
  assert.deepEqual(env, {
    NATS_URL: "nats://a:4222,nats://b:4222",
    NATS_TLS_CA: "/etc/nats/ca.pem",
    EVALFLEET_GATEWAY_URL: "http://gw:8787",
  });
});
