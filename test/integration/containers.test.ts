/**
 * The container client against the real daemon (test/helpers/docker.ts finds or starts one): every option the
 * grader and the attempt sandboxes rely on is checked from inside a container, not read back from our own request.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { ContainerError, type ContainerRuntime, MANAGED_LABEL } from "../../containers/index.js";
import { testBaseImage, testRegistry, testRuntime } from "../helpers/docker.js";

let rt: ContainerRuntime;
let base: string;
const owner = `containers-test-${randomBytes(4).toString("hex")}`;
const labels = { "io.evalfleet.owner": owner };
const name = (what: string) => `ef-ct-${what}-${randomBytes(3).toString("hex")}`;

before(async () => {
  rt = (await testRuntime()).runtime;
  base = (await testBaseImage()).ref;
});

after(async () => {
  // Whatever a failed test left behind is found by its label.
  if (rt) await rt.removeAll(labels);
});

describe("run", () => {
  it("runs a command as the given user with env and workdir, stdout and stderr apart, then removes it", async () => {
    const n = name("run");
    const r = await rt.run({
      image: base,
      name: n,
      command: ["bash", "-c", 'id -u; echo "$GREETING"; pwd; echo oops >&2; exit 7'],
      user: "1000:1000",
      env: { GREETING: "hello there" },
      workdir: "/tmp",
      labels,
    });
    assert.equal(r.exitCode, 7);
    assert.equal(r.stdout, "1000\nhello there\n/tmp\n");
    assert.equal(r.stderr, "oops\n");
    assert.deepEqual(await rt.list({ "io.evalfleet.owner": owner, [MANAGED_LABEL]: "true" }), []);
    assert.equal(await rt.container(n).state(), null, "the container is gone");
  });

  it("has no network but loopback", async () => {
    const r = await rt.run({ image: base, command: ["ls", "/sys/class/net"], labels });
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout.trim(), "lo");
  });

  it("kills at the timeout and still removes the container", async () => {
    const n = name("timeout");
    const r = await rt.run({ image: base, name: n, command: ["sleep", "300"], labels }, { timeoutMs: 1500 });
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, null);
    assert.equal(await rt.container(n).state(), null);
  });

  it("stops on abort", async () => {
    const ac = new AbortController();
    const running = rt.run({ image: base, command: ["sleep", "300"], labels }, { signal: ac.signal });
    setTimeout(() => ac.abort(), 1000);
    const r = await running;
    assert.equal(r.aborted, true);
    assert.equal(r.exitCode, null);
  });

  it("enforces the memory limit (OOM kill), the pids limit and the CPU quota", async () => {
    const hog = await rt.run({
      image: base,
      command: ["node", "-e", "const a=[];for(;;)a.push(Buffer.alloc(8<<20,1))"],
      limits: { memoryBytes: 96 * 2 ** 20 },
      labels,
    });
    assert.equal(hog.oomKilled, true, `exit ${hog.exitCode}: ${hog.combined}`);
    assert.notEqual(hog.exitCode, 0);

    const forks = await rt.run(
      {
        image: base,
        command: ["bash", "-c", "for i in $(seq 1 40); do sleep 30 & done 2>/dev/null; jobs -r | wc -l"],
        limits: { pids: 16 },
        labels,
      },
      { timeoutMs: 60_000 },
    );
    const started = Number(forks.stdout.trim());
    assert.ok(started < 16, `only up to the pids limit started (got ${forks.combined})`);

    const c = await rt.create({ image: base, command: ["true"], limits: { cpus: 0.5 }, labels });
    try {
      const info = await rt.docker.getContainer(c.id).inspect();
      assert.equal(info.HostConfig.NanoCpus, 500_000_000);
    } finally {
      await c.remove();
    }
  });

  it("read-only root with a writable tmpfs; bind mounts read-only or not", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "ef-ct-mount-"));
    try {
      await mkdir(path.join(dir, "ro"));
      await mkdir(path.join(dir, "rw"));
      await writeFile(path.join(dir, "ro", "in.txt"), "from the host\n");
      await chmod(path.join(dir, "rw"), 0o777);
      const r = await rt.run({
        image: base,
        user: "1000:1000",
        command: [
          "bash",
          "-c",
          [
            "cat /in/in.txt",
            "touch /root-write 2>/dev/null && echo root-writable || echo root-readonly",
            "touch /in/x 2>/dev/null && echo ro-writable || echo ro-readonly",
            "echo out > /out/out.txt && echo rw-ok",
            "echo t > /tmp/t && echo tmp-ok",
          ].join("; "),
        ],
        readOnlyRoot: true,
        tmpfs: { "/tmp": "rw,size=8m,mode=1777" },
        mounts: [
          { source: path.join(dir, "ro"), target: "/in", readOnly: true },
          { source: path.join(dir, "rw"), target: "/out" },
        ],
        labels,
      });
      assert.equal(r.stdout, "from the host\nroot-readonly\nro-readonly\nrw-ok\ntmp-ok\n", r.combined);
      assert.equal(await readFile(path.join(dir, "rw", "out.txt"), "utf8"), "out\n");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("reaches a unix socket in a mounted host folder from a network-none container, as non-root", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "ef-ct-sock-"));
    await chmod(dir, 0o755);
    const sock = path.join(dir, "s.sock");
    const server = createServer((c) => {
      c.once("data", (b) => c.end(`pong:${b.toString()}`));
    });
    await new Promise<void>((resolve) => server.listen(sock, resolve));
    await chmod(sock, 0o777);
    try {
      const r = await rt.run(
        {
          image: base,
          user: "1000:1000",
          command: [
            "node",
            "-e",
            "const c=require('net').connect('/run/ef/s.sock',()=>c.write('ping'));c.on('data',d=>process.stdout.write(d))",
          ],
          mounts: [{ source: dir, target: "/run/ef" }],
          labels,
        },
        { timeoutMs: 60_000 },
      );
      assert.equal(r.stdout, "pong:ping", r.combined);
    } finally {
      server.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("step by step", () => {
  it("copies files in, execs with user / workdir / env, and reports exit codes", async () => {
    const c = await rt.create({ image: base, command: ["sleep", "600"], labels });
    try {
      await c.start();
      await c.putFiles("/tmp", [
        { name: "job/eval.sh", content: 'echo "in $(pwd) as $(id -u): $X"; exit 4', mode: 0o755 },
      ]);
      const r = await c.exec(["bash", "/tmp/job/eval.sh"], {
        user: "1000",
        workdir: "/home/evalfleet",
        env: { X: "y" },
      });
      assert.equal(r.exitCode, 4);
      assert.equal(r.stdout, "in /home/evalfleet as 1000: y\n");
      const slow = await c.exec(["sleep", "100"], { timeoutMs: 500 });
      assert.equal(slow.timedOut, true);
      const st = await c.state();
      assert.equal(st?.Running, true);
    } finally {
      await c.remove();
    }
    assert.equal(await c.state(), null);
    await c.remove(); // idempotent
    await c.kill(); // a gone container is fine to kill
  });

  it("finds a crashed supervisor's leftovers by label and removes them", async () => {
    const mine = { "io.evalfleet.owner": `${owner}-crash` };
    const a = await rt.create({ image: base, command: ["sleep", "600"], labels: mine });
    await a.start();
    await rt.create({ image: base, command: ["true"], labels: mine });
    const other = await rt.create({ image: base, command: ["true"], labels });
    try {
      const found = await rt.list(mine);
      assert.equal(found.length, 2);
      const removed = await rt.removeAll(mine);
      assert.equal(removed.length, 2);
      assert.deepEqual(await rt.list(mine), []);
      assert.equal((await rt.list(labels)).length, 1, "other owners' containers stay");
    } finally {
      await other.remove();
    }
  });
});

describe("images", () => {
  it("builds with no network, removes anonymous volumes with the container", async () => {
    const ctx = await mkdtemp(path.join(tmpdir(), "ef-ct-build-"));
    const tag = `evalfleet-test/vol:${randomBytes(3).toString("hex")}`;
    try {
      await writeFile(
        path.join(ctx, "Dockerfile"),
        [
          `FROM ${base}`,
          'RUN test "$(ls /sys/class/net)" = lo && echo no-network-in-build',
          "COPY hello.txt /hello.txt",
          "VOLUME /data",
          "",
        ].join("\n"),
      );
      await writeFile(path.join(ctx, "hello.txt"), "hi\n");
      let output = "";
      await rt.build(ctx, {
        tag,
        onOutput: (s) => {
          output += s;
        },
      });
      assert.match(output, /no-network-in-build/);
      const c = await rt.create({ image: tag, command: ["cat", "/hello.txt"], labels });
      const info = await rt.docker.getContainer(c.id).inspect();
      const volume = info.Mounts.find((m) => m.Destination === "/data")?.Name;
      assert.ok(volume, "an anonymous volume was made");
      await c.remove();
      await assert.rejects(rt.docker.getVolume(volume).inspect(), /no such volume/i);
    } finally {
      await rt.removeImage(tag, { force: true });
      await rm(ctx, { recursive: true, force: true });
    }
  });

  it("fails a build whose step fails, with the step's output", async () => {
    const ctx = await mkdtemp(path.join(tmpdir(), "ef-ct-build-"));
    try {
      await writeFile(path.join(ctx, "Dockerfile"), `FROM ${base}\nRUN echo about-to-fail && exit 3\n`);
      await assert.rejects(rt.build(ctx, { tag: "evalfleet-test/broken:x" }), (e: unknown) => {
        assert.ok(e instanceof ContainerError);
        assert.equal(e.failure, "build");
        assert.match(e.message, /about-to-fail/);
        return true;
      });
    } finally {
      await rm(ctx, { recursive: true, force: true });
    }
  });

  it("tags, pushes to a registry, pins by digest and pulls it back", async () => {
    const registry = await testRegistry();
    const repo = `${registry}/evalfleet-test/push-${randomBytes(3).toString("hex")}`;
    await rt.tag(base, `${repo}:v1`);
    const digest = await rt.push(`${repo}:v1`);
    assert.match(digest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(await rt.repoDigest(`${repo}:v1`), digest);
    const pinned = `${repo}@${digest}`;
    await rt.removeImage(`${repo}:v1`);
    await rt.pull(pinned);
    const info = await rt.inspectImage(pinned);
    assert.ok(info?.repoDigests.includes(pinned));
    await rt.removeImage(pinned);
  });

  it("reports a missing image as not_found or pull, never as a crash of the code inside", async () => {
    const registry = await testRegistry();
    await assert.rejects(rt.pull(`${registry}/evalfleet-test/absent:nope`), (e: unknown) => {
      assert.ok(e instanceof ContainerError);
      assert.ok(e.failure === "not_found" || e.failure === "pull", e.failure);
      return true;
    });
    await assert.rejects(rt.create({ image: "evalfleet-test/absent:nope", labels }), (e: unknown) => {
      assert.ok(e instanceof ContainerError && e.failure === "not_found", String(e));
      return true;
    });
    assert.equal(await rt.inspectImage("evalfleet-test/absent:nope"), null);
  });

  it("imports a rootfs tarball as an image", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "ef-ct-import-"));
    const tag = `evalfleet-test/imported:${randomBytes(3).toString("hex")}`;
    try {
      const { tarFiles } = await import("../../containers/index.js");
      const tarball = path.join(dir, "rootfs.tar");
      await writeFile(tarball, tarFiles([{ name: "etc/marker", content: "imported\n" }]));
      const id = await rt.importRootfs(tarball, tag, { changes: ["ENV MARK=1"] });
      const info = await rt.inspectImage(tag);
      assert.equal(info?.id, id);
      const cfg = await rt.docker.getImage(tag).inspect();
      assert.ok(cfg.Config.Env?.includes("MARK=1"));
    } finally {
      await rt.removeImage(tag, { force: true });
      await rm(dir, { recursive: true, force: true });
    }
  });
});
