/**
 * AWS Signature Version 4, checked the way AWS checks it: the request is canonicalised again from what arrived on
 * the wire, the string to sign rebuilt, the signature recomputed with the secret of the access key named in the
 * Authorization header, and compared in constant time. The real `@aws-sdk` clients sign; this is the other side,
 * written from the specification (docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html), so a
 * request the SDK did not sign correctly for this endpoint is refused here as AWS would refuse it.
 */
import { createHash, createHmac, timingSafeEqual } from "node:crypto";

export interface Credential {
  accessKeyId: string;
  secretAccessKey: string;
  /** Who this key is (the task role it stands for); returned on success. */
  principal: string;
}

export interface SignedRequest {
  method: string;
  /** path and query as sent (`/?a=b`). */
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

export type SigV4Result =
  | { ok: true; principal: string; accessKeyId: string; region: string; service: string }
  | { ok: false; code: string; message: string };

const ALGORITHM = "AWS4-HMAC-SHA256";
const MAX_SKEW_MS = 15 * 60_000;

const sha256 = (data: string | Buffer): string => createHash("sha256").update(data).digest("hex");
const hmac = (key: Buffer | string, data: string): Buffer => createHmac("sha256", key).update(data).digest();

/** RFC 3986 encoding as SigV4 wants it: unreserved characters kept, everything else %XX (upper case). */
function uriEncode(s: string, keepSlash: boolean): string {
  let out = "";
  for (const ch of Buffer.from(s, "utf8")) {
    const c = String.fromCharCode(ch);
    if (/[A-Za-z0-9\-._~]/.test(c) || (keepSlash && c === "/")) out += c;
    else out += `%${ch.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

function canonicalQuery(query: string): string {
  if (!query) return "";
  return query
    .split("&")
    .filter(Boolean)
    .map((kv) => {
      const i = kv.indexOf("=");
      const k = decodeURIComponent((i < 0 ? kv : kv.slice(0, i)).replace(/\+/g, " "));
      const v = i < 0 ? "" : decodeURIComponent(kv.slice(i + 1).replace(/\+/g, " "));
      return [uriEncode(k, false), uriEncode(v, false)] as const;
    })
    .sort((a, b) => (a[0] === b[0] ? (a[1] < b[1] ? -1 : 1) : a[0] < b[0] ? -1 : 1))
    .map(([k, v]) => `${k}=${v}`)
    .join("&");
}

function header(h: SignedRequest["headers"], name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v.join(",") : v;
}

export function signingKey(secret: string, date: string, region: string, service: string): Buffer {
  return hmac(hmac(hmac(hmac(`AWS4${secret}`, date), region), service), "aws4_request");
}

/** The canonical request of `req` over `signedHeaders` (exported so a test can sign one by hand). */
export function canonicalRequest(req: SignedRequest, signedHeaders: string[], payloadHash: string): string {
  const q = req.url.indexOf("?");
  const path = q < 0 ? req.url : req.url.slice(0, q);
  const query = q < 0 ? "" : req.url.slice(q + 1);
  const encodedPath = path
    .split("/")
    .map((seg) => uriEncode(decodeURIComponent(seg), false))
    .join("/");
  const headers = signedHeaders
    .map((n) => `${n}:${(header(req.headers, n) ?? "").trim().replace(/\s+/g, " ")}\n`)
    .join("");
  return [
    req.method,
    encodedPath || "/",
    canonicalQuery(query),
    headers,
    signedHeaders.join(";"),
    payloadHash,
  ].join("\n");
}

/** Verify `req`'s SigV4 signature for `service`. `now` is the server's clock. */
export function verifySigV4(
  req: SignedRequest,
  service: string,
  lookup: (accessKeyId: string) => Credential | undefined,
  now = Date.now(),
): SigV4Result {
  const auth = header(req.headers, "authorization");
  if (!auth)
    return {
      ok: false,
      code: "MissingAuthenticationTokenException",
      message: "Missing Authentication Token",
    };
  const m =
    /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request,\s*SignedHeaders=([^,]+),\s*Signature=([0-9a-f]{64})$/.exec(
      auth.trim(),
    );
  if (!m)
    return {
      ok: false,
      code: "IncompleteSignatureException",
      message: `Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' (${ALGORITHM})`,
    };
  const [, accessKeyId, date, region, signedService, signedHeaderList, signature] = m as unknown as string[];
  const cred = lookup(accessKeyId!);
  if (!cred)
    return {
      ok: false,
      code: "UnrecognizedClientException",
      message: "The security token included in the request is invalid.",
    };
  if (signedService !== service)
    return {
      ok: false,
      code: "InvalidSignatureException",
      message: `Credential should be scoped to correct service: '${service}'.`,
    };
  const signedHeaders = signedHeaderList!.split(";");
  if (!signedHeaders.includes("host"))
    return { ok: false, code: "InvalidSignatureException", message: "'Host' must be a signed header." };
  const amzDate = header(req.headers, "x-amz-date");
  if (!amzDate || !signedHeaders.includes("x-amz-date") || !amzDate.startsWith(date!))
    return {
      ok: false,
      code: "IncompleteSignatureException",
      message: "X-Amz-Date must be signed and match the scope.",
    };
  const t = Date.parse(
    `${amzDate.slice(0, 4)}-${amzDate.slice(4, 6)}-${amzDate.slice(6, 8)}T${amzDate.slice(9, 11)}:${amzDate.slice(11, 13)}:${amzDate.slice(13, 15)}Z`,
  );
  if (!Number.isFinite(t) || Math.abs(now - t) > MAX_SKEW_MS)
    return {
      ok: false,
      code: "InvalidSignatureException",
      message: `Signature expired: ${amzDate} is now earlier or later than 15 minutes from the server's time.`,
    };
  const payloadHash = header(req.headers, "x-amz-content-sha256") ?? sha256(req.body);
  if (payloadHash !== "UNSIGNED-PAYLOAD" && payloadHash !== sha256(req.body))
    return {
      ok: false,
      code: "InvalidSignatureException",
      message: "The provided payload hash does not match.",
    };
  const creq = canonicalRequest(req, signedHeaders, payloadHash);
  const scope = `${date}/${region}/${service}/aws4_request`;
  const toSign = [ALGORITHM, amzDate, scope, sha256(creq)].join("\n");
  const expected = hmac(signingKey(cred.secretAccessKey, date!, region!, service), toSign);
  const given = Buffer.from(signature!, "hex");
  if (given.length !== expected.length || !timingSafeEqual(given, expected))
    return {
      ok: false,
      code: "InvalidSignatureException",
      message:
        "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.",
    };
  return { ok: true, principal: cred.principal, accessKeyId: accessKeyId!, region: region!, service };
}
