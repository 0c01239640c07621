import { defineGroup, httpUrlText, optionalText, setting } from "./setting.js";

/** The judge's settings: where its model calls go, and its own key there. */
export interface JudgeSettings {
  gatewayUrl: string;
  /** its own gateway key; absent: the judge makes one in the database it shares with the gateway, at start */
  judgeKey?: string;
}

export const judgeGroup = defineGroup({
  name: "judge",
  doc: "The judge's gateway and key.",
  settings: {
    url: setting({
      env: "EVALFLEET_JUDGE_URL",
      doc: "where judge calls go",
      schema: httpUrlText.optional(),
      defaultDoc: "EVALFLEET_GATEWAY_URL",
    }),
    key: setting({
      env: "EVALFLEET_JUDGE_KEY",
      doc: "the judge's own gateway key (default: one the judge makes at start in the shared database)",
      schema: optionalText,
      secret: true,
    }),
  },
  compile: (v, ctx): JudgeSettings => {
    const gatewayUrl = v.url ?? ctx.value<string>("EVALFLEET_GATEWAY_URL") ?? "";
    return v.key === undefined ? { gatewayUrl } : { gatewayUrl, judgeKey: v.key };
  },
});
