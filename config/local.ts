import { z } from "zod";
import { defineGroup, setting } from "./setting.js";

/** What only the local launcher (`up`, `start`) and the commands that read its state need. */
export const natsServerGroup = defineGroup({
  name: "nats-server",
  doc: "The nats-server binary a local plane (or `report` reading its store) starts.",
  settings: {
    bin: setting({
      env: "NATS_SERVER_BIN",
      doc: "path of the nats-server binary",
      schema: z.string().min(1),
      default: "nats-server",
    }),
  },
  compile: (v): { bin: string } => ({ bin: v.bin }),
});
