import { defineGroup, requiredText, setting } from "./setting.js";

/** The standalone shim's key (`evalfleet shim`): the run's key, never a flag. */
export const shimGroup = defineGroup({
  name: "shim",
  doc: "The standalone shim's upstream key; NATS only when NATS_URL is given (else ledger rows go to stderr).",
  settings: {
    key: setting({
      env: "EVALFLEET_RUN_KEY",
      doc: "the run's key the shim forwards with",
      schema: requiredText(
        "set it to the run's gateway key (or the provider key when forwarding to a provider)",
      ),
      secret: true,
    }),
  },
  compile: (v, ctx): { key: string; useNats: boolean } => ({
    key: v.key,
    useNats: ctx.source("NATS_URL") !== "default" && ctx.source("NATS_URL") !== "unset",
  }),
});
