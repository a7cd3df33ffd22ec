/**
 * `@journald/client/langgraph`: a LangGraph.js checkpointer on journald (needs
 * `@langchain/langgraph-checkpoint` and `@langchain/core`, peer dependencies).
 */
export { JournaldSaver, type JournaldSaverOptions } from "./saver";
export { FINGERPRINT, INLINE_MAX_BYTES, NS_BLOB, NS_CHECKPOINT, NS_WRITES, runIdFor, THREAD_LABEL } from "./layout";
