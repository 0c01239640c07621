import { z } from "zod";
import { defineGroup, listText, optionalText, setting } from "./setting.js";

/** Who may read the dashboard: the Host names it answers to and, optionally, a token. */
export interface DashboardAccess {
  /** host names (besides localhost and IP literals) a request's Host header may carry */
  allowedHosts: string[];
  /** when set, every request must carry it (cookie, bearer header, or ?token= once) */
  token?: string;
}

export const dashboardAccessGroup = defineGroup({
  name: "dashboard-access",
  doc: "Who may read the dashboard. Requests whose Host header names another host are refused (DNS rebinding).",
  settings: {
    allowedHosts: setting({
      env: "EVALFLEET_DASHBOARD_ALLOWED_HOSTS",
      doc: "host names the dashboard answers to besides localhost and IP addresses, comma-separated (the name you browse it by)",
      schema: listText,
      hint: "e.g. evalfleet.internal,dash.example.com",
    }),
    token: setting({
      env: "EVALFLEET_DASHBOARD_TOKEN",
      doc: "a token every request must carry (open the printed URL once: it sets a cookie); unset: no token",
      schema: optionalText.pipe(
        z
          .string()
          .min(16, { error: "must be at least 16 characters (e.g. `openssl rand -hex 16`)" })
          .optional(),
      ),
      secret: true,
    }),
  },
  compile: (v): DashboardAccess => ({
    allowedHosts: v.allowedHosts.map((h) => h.toLowerCase()),
    ...(v.token ? { token: v.token } : {}),
  }),
});
