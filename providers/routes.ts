import type { Endpoint, Provider } from "./types.js";

/** A metered route: which wire family and endpoint a path is. */
export interface Route {
  provider: Provider;
  endpoint: Endpoint;
}

/** The provider paths evalfleet meters, the same for the shim, the gateway and the scripted provider. */
const ROUTES: Readonly<Record<string, Route>> = {
  "/v1/messages": { provider: "anthropic", endpoint: "messages" },
  "/v1/messages/count_tokens": { provider: "anthropic", endpoint: "count_tokens" },
  "/v1/chat/completions": { provider: "openai", endpoint: "chat_completions" },
  "/v1/responses": { provider: "openai", endpoint: "responses" },
};

/** The route of a request path (no query string; one trailing `/` allowed), or undefined for an unmetered path. */
export function routeOf(pathname: string): Route | undefined {
  const p = pathname.endsWith("/") ? pathname.slice(0, -1) : pathname;
  return Object.hasOwn(ROUTES, p) ? ROUTES[p] : undefined;
}
