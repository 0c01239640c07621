export * from "./anthropic.js";
export * from "./errors.js";
export * from "./openai.js";
export * from "./pricing.js";
export * from "./sse.js";
export * from "./types.js";
