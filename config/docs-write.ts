/** `npm run docs:config`: write docs/configuration.md from the role schemas. */
import { writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { renderConfigDocs } from "./docs.js";

export const CONFIG_DOC = resolve(import.meta.dirname, "../docs/configuration.md");

writeFileSync(CONFIG_DOC, renderConfigDocs());
process.stdout.write(`wrote ${CONFIG_DOC}\n`);
