/**
 * The small graph the LangGraph.js tests and the benchmark run through every saver: a
 * scripted "model" node that asks for two tools at once, one `tool` task per call (Send),
 * the model again, then an approval step that interrupts and is resumed. Message ids and
 * the model's answers are fixed, so two savers given the same inputs hold the same states.
 */
import { AIMessage, type BaseMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import type { BaseCheckpointSaver } from "@langchain/langgraph-checkpoint";
import { Annotation, END, interrupt, MessagesAnnotation, Send, START, StateGraph } from "@langchain/langgraph";

export const State = Annotation.Root({
  ...MessagesAnnotation.spec,
  approved: Annotation<string>,
});

export interface ToolCall {
  id: string;
  name: string;
  args: Record<string, unknown>;
}

/** What a tool does; `hooks.started` is told before it runs (the crash test waits on it). */
export interface Hooks {
  started?: (call: ToolCall) => void;
  run?: (call: ToolCall) => Promise<string>;
}

function plainTool(call: ToolCall): string {
  if (call.name === "add") return String(Number(call.args.a) + Number(call.args.b));
  return `definition of ${String(call.args.term)}`;
}

/**
 * The scripted model: tool calls for a new question, an answer once both tools answered. Like
 * a real model API it refuses a history with a tool call no result answers.
 */
function model(messages: BaseMessage[]): AIMessage {
  const orphans = orphanCalls(messages);
  if (orphans.length) throw new Error(`400 invalid_request: tool calls without a result: ${orphans.join(", ")}`);
  const asked = messages.filter((m) => m instanceof HumanMessage).length;
  const last = messages[messages.length - 1];
  if (last instanceof HumanMessage) {
    return new AIMessage({
      id: `ai-${asked}-calls`,
      content: "",
      tool_calls: [
        { id: `call-add-${asked}`, name: "add", args: { a: 2, b: 3 } },
        { id: `call-lookup-${asked}`, name: "lookup", args: { term: "sum" } },
      ],
    });
  }
  const results = messages.filter((m) => m instanceof ToolMessage).map((m) => String(m.content));
  return new AIMessage({ id: `ai-${asked}-answer`, content: `answer: ${results.join("; ")}` });
}

export function buildGraph(checkpointer: BaseCheckpointSaver, hooks: Hooks = {}) {
  return new StateGraph(State)
    .addNode("agent", (s) => ({ messages: [model(s.messages)] }))
    .addNode("tool", async (input: unknown) => {
      const call = (input as { call: ToolCall }).call;
      hooks.started?.(call);
      const content = hooks.run ? await hooks.run(call) : plainTool(call);
      return { messages: [new ToolMessage({ id: `result-${call.id}`, tool_call_id: call.id, content })] };
    })
    .addNode("approve", () => {
      const answer = interrupt({ question: "send the answer?" }) as string;
      return { approved: answer };
    })
    .addEdge(START, "agent")
    .addConditionalEdges(
      "agent",
      (s) => {
        const last = s.messages[s.messages.length - 1] as AIMessage;
        const calls = last.tool_calls ?? [];
        return calls.length ? calls.map((call) => new Send("tool", { call })) : "approve";
      },
      ["tool", "approve"],
    )
    .addEdge("tool", "agent")
    .addEdge("approve", END)
    .compile({ checkpointer });
}

export type Graph = ReturnType<typeof buildGraph>;

export const question = (n = 1) => ({ messages: [new HumanMessage({ id: `human-${n}`, content: "what is 2 + 3?" })] });

/** Tool calls of the state's AI messages that no ToolMessage answers (what a model would refuse). */
export function orphanCalls(messages: BaseMessage[]): string[] {
  const answered = new Set(messages.filter((m) => m instanceof ToolMessage).map((m) => (m as ToolMessage).tool_call_id));
  return messages.flatMap((m) => (m instanceof AIMessage ? (m.tool_calls ?? []) : [])).flatMap((c) => (answered.has(c.id ?? "") ? [] : [c.id ?? ""]));
}
