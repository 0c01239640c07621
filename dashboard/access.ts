import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { DashboardAccess } from "../config/index.js";

/*
 * Who may read the dashboard. A web page on another site can reach a dashboard on 127.0.0.1 by DNS rebinding (its
 * own name re-pointed at 127.0.0.1): the browser then sends that name as Host, so a request is answered only when
 * its Host is localhost, an IP address, or a name the operator allowed. With a token set, every request must also
 * carry it: as a cookie (set by opening the printed URL once, `?token=…`) or an `Authorization: Bearer` header.
 */

export const TOKEN_COOKIE = "evalfleet_dashboard";

/** The host name of a Host header (no port, IPv6 brackets kept), lower-cased; "" when absent. */
export function hostName(host: string | undefined): string {
  const h = (host ?? "").trim().toLowerCase();
  if (h.startsWith("[")) return h.slice(0, h.indexOf("]") + 1);
  return h.replace(/:\d+$/, "");
}

const IPV4 = /^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$/;

export function hostAllowed(host: string | undefined, allowed: readonly string[]): boolean {
  const name = hostName(host);
  if (name === "") return false;
  return name === "localhost" || IPV4.test(name) || /^\[[0-9a-f:.]+\]$/.test(name) || allowed.includes(name);
}

const digest = (s: string) => createHash("sha256").update(s).digest();
const same = (a: string, b: string) => timingSafeEqual(digest(a), digest(b));

function cookie(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? "").split(";")) {
    const i = part.indexOf("=");
    if (i > 0 && part.slice(0, i).trim() === name) return decodeURIComponent(part.slice(i + 1).trim());
  }
  return undefined;
}

function refuse(res: ServerResponse, status: number, error: string): false {
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" });
  res.end(JSON.stringify({ error }));
  return false;
}

/** True when the request may be served; otherwise the answer (403, 401, or the redirect that sets the cookie) is sent. */
export function admit(req: IncomingMessage, res: ServerResponse, url: URL, access: DashboardAccess): boolean {
  if (!hostAllowed(req.headers.host, access.allowedHosts))
    return refuse(
      res,
      403,
      `this dashboard does not answer to the host "${hostName(req.headers.host)}": browse it by localhost or its IP ` +
        "address, or add the name to EVALFLEET_DASHBOARD_ALLOWED_HOSTS (a page that reaches it under another name may be a DNS rebinding attack)",
    );
  const token = access.token;
  if (!token) return true;
  const given = url.searchParams.get("token");
  if (given !== null && same(given, token)) {
    url.searchParams.delete("token");
    res.writeHead(303, {
      location: `${url.pathname}${url.search}`,
      "set-cookie": `${TOKEN_COOKIE}=${encodeURIComponent(token)}; HttpOnly; SameSite=Strict; Path=/`,
      "cache-control": "no-store",
    });
    res.end();
    return false;
  }
  const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
  const held = bearer ?? cookie(req, TOKEN_COOKIE);
  if (held !== undefined && same(held, token)) return true;
  return refuse(
    res,
    401,
    "this dashboard needs its token: open the URL `evalfleet dashboard` printed (it ends in ?token=…), or send " +
      "Authorization: Bearer <EVALFLEET_DASHBOARD_TOKEN>",
  );
}
