/** The container client's pure parts: where DOCKER_HOST points, the tar it sends, the stream it demuxes. */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import {
  ContainerError,
  ContainerRuntime,
  demux,
  resolveEndpoint,
  splitReference,
  tarFiles,
  toContainerError,
  unavailableHint,
} from "../../containers/index.js";

describe("resolveEndpoint", () => {
  it("uses DOCKER_HOST unix sockets as given", () => {
    const ep = resolveEndpoint({ DOCKER_HOST: "unix:///run/x/docker.sock" });
    assert.deepEqual(ep, {
      kind: "unix",
      socketPath: "/run/x/docker.sock",
      label: "unix:///run/x/docker.sock",
      fromEnv: true,
    });
  });

  it("reads tcp hosts, with TLS when DOCKER_TLS_VERIFY is set", () => {
    const plain = resolveEndpoint({ DOCKER_HOST: "tcp://10.1.2.3:2375" });
    assert.equal(plain.kind, "tcp");
    assert.deepEqual(plain.kind === "tcp" && [plain.protocol, plain.host, plain.port], [
      "http",
      "10.1.2.3",
      2375,
    ]);
    const tls = resolveEndpoint({
      DOCKER_HOST: "tcp://d.example:2376",
      DOCKER_TLS_VERIFY: "1",
      DOCKER_CERT_PATH: "/c",
    });
    assert.deepEqual(tls.kind === "tcp" && [tls.protocol, tls.certPath], ["https", "/c"]);
  });

  it("reads ssh hosts", () => {
    const ep = resolveEndpoint({ DOCKER_HOST: "ssh://ops@build.example:2222" });
    assert.deepEqual(ep.kind === "ssh" && [ep.host, ep.port, ep.username], ["build.example", 2222, "ops"]);
  });

  it("without DOCKER_HOST picks the first socket that exists: docker's, then Podman's", () => {
    const env = { XDG_RUNTIME_DIR: "/run/user/1000" };
    const podman = "/run/user/1000/podman/podman.sock";
    const ep = resolveEndpoint(env, (p) => p === podman);
    assert.equal(ep.kind === "unix" && ep.socketPath, podman);
    assert.equal(
      resolveEndpoint(env, () => true).kind === "unix" && resolveEndpoint(env, () => true).label,
      "unix:///var/run/docker.sock",
    );
    assert.equal(resolveEndpoint(env, () => false).label, "unix:///var/run/docker.sock");
  });

  it("refuses a DOCKER_HOST it cannot use, saying what to write", () => {
    for (const bad of ["unix://relative.sock", "ftp://x", "not a url"]) {
      assert.throws(
        () => resolveEndpoint({ DOCKER_HOST: bad }),
        (e: unknown) =>
          e instanceof ContainerError && e.failure === "invalid" && /unix:\/\/\/path/.test(e.message),
        bad,
      );
    }
  });

  it("says where it looked and what to start when nothing answers", () => {
    const msg = unavailableHint(
      resolveEndpoint({}, () => false),
      {},
    );
    assert.match(msg, /DOCKER_HOST is unset; tried \/var\/run\/docker.sock/);
    assert.match(msg, /podman\.socket/);
    assert.match(
      unavailableHint(resolveEndpoint({ DOCKER_HOST: "unix:///nope.sock" }), {}),
      /DOCKER_HOST=unix:\/\/\/nope.sock/,
    );
  });
});

describe("ContainerRuntime.connect", () => {
  it("fails with unavailable and the hint when the socket is not there", async () => {
    const env = { DOCKER_HOST: `unix://${path.join(tmpdir(), "evalfleet-no-such.sock")}` };
    await assert.rejects(ContainerRuntime.connect({ env }), (e: unknown) => {
      assert.ok(e instanceof ContainerError);
      assert.equal(e.failure, "unavailable");
      assert.equal(e.retryable, true);
      assert.match(e.message, /nothing answered at DOCKER_HOST=unix:.*evalfleet-no-such\.sock/);
      return true;
    });
    const probe = await ContainerRuntime.probe({ env });
    assert.equal(probe.ok, false);
  });
});

describe("tarFiles", () => {
  it("writes an archive tar reads back byte for byte, modes kept", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "ef-tar-"));
    try {
      const body = "line one\n\u00e9\u4e2d\n".repeat(100);
      const archive = path.join(dir, "a.tar");
      writeFileSync(
        archive,
        tarFiles([
          { name: "patch.diff", content: body },
          { name: "sub/eval.sh", content: "#!/bin/bash\necho hi\n", mode: 0o755 },
          { name: "empty", content: "" },
        ]),
      );
      const out = path.join(dir, "out");
      execFileSync("mkdir", ["-p", out]);
      execFileSync("tar", ["-xf", archive, "-C", out]);
      assert.equal(readFileSync(path.join(out, "patch.diff"), "utf8"), body);
      assert.equal(readFileSync(path.join(out, "sub/eval.sh"), "utf8"), "#!/bin/bash\necho hi\n");
      assert.equal(readFileSync(path.join(out, "empty"), "utf8"), "");
      const listing = execFileSync("tar", ["-tvf", archive], { encoding: "utf8" });
      assert.match(listing, /-rwxr-xr-x .* sub\/eval\.sh/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("refuses names that could escape the target folder", () => {
    for (const name of ["/etc/passwd", "../x", "a/../../x", "", "a//b", "x".repeat(101)]) {
      assert.throws(() => tarFiles([{ name, content: "" }]), ContainerError, name);
    }
  });
});

describe("demux", () => {
  const frame = (stream: number, s: string) => {
    const body = Buffer.from(s);
    const h = Buffer.alloc(8);
    h[0] = stream;
    h.writeUInt32BE(body.length, 4);
    return Buffer.concat([h, body]);
  };
  it("splits stdout and stderr and keeps their interleaving", () => {
    const d = demux(Buffer.concat([frame(1, "a"), frame(2, "E"), frame(1, "b\n"), frame(2, "")]));
    assert.deepEqual(d, { stdout: "ab\n", stderr: "E", combined: "aEb\n" });
  });
  it("keeps a truncated last frame", () => {
    const whole = frame(1, "hello");
    assert.equal(demux(whole.subarray(0, whole.length - 2)).stdout, "hel");
  });
});

describe("splitReference and errors", () => {
  it("splits registry host ports from tags and keeps digests", () => {
    assert.deepEqual(splitReference("127.0.0.1:5000/a/b:t1"), { repo: "127.0.0.1:5000/a/b", tag: "t1" });
    assert.deepEqual(splitReference("127.0.0.1:5000/a/b"), { repo: "127.0.0.1:5000/a/b", tag: "latest" });
    const d = `sha256:${"0".repeat(64)}`;
    assert.deepEqual(splitReference(`x/y@${d}`), { repo: "x/y", digest: d });
  });
  it("maps daemon answers to failure kinds", () => {
    const daemon = (statusCode: number, message: string) => ({ statusCode, json: { message } });
    assert.equal(toContainerError(daemon(404, "No such image: x"), "create", "c").failure, "not_found");
    assert.equal(
      toContainerError(daemon(500, "write /x: no space left on device"), "create", "c").failure,
      "out_of_disk",
    );
    assert.equal(toContainerError(daemon(500, "oci runtime error"), "start", "s").failure, "start");
    assert.equal(toContainerError(daemon(409, "name in use"), "create", "c").failure, "invalid");
    assert.equal(
      toContainerError({ code: "ECONNREFUSED", message: "x" }, "pull", "p").failure,
      "unavailable",
    );
  });
});
