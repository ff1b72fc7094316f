// Vercel AI SDK v6 scenario for tests/vercel_ai.rs: a scripted `MockLanguageModelV3` agent with
// `experimental_telemetry`, exported through the stock OTLP/HTTP protobuf exporter.
//
//   node scenario.mjs run --endpoint URL --session ID [--record FILE]
//     generateText and streamText, each: two parallel tool calls, then a failing tool, then text.
//     Prints one JSON line: per call the input (system, messages) and the SDK's
//     `response.messages`. With --record, the spans are also written to FILE as an OTLP
//     ExportTraceServiceRequest (protobuf), for fixtures.
//   node scenario.mjs continue --file FILE
//     FILE holds {system, messages} (a `vercel-ai` continuation); runs generateText({system,
//     messages: [...messages, next user turn]}) and prints the prompt the model received.
import { readFileSync, writeFileSync } from 'node:fs';
import { trace, context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, BatchSpanProcessor, SimpleSpanProcessor, InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { generateText, streamText, tool, stepCountIs } from 'ai';
import { MockLanguageModelV3, convertArrayToReadableStream } from 'ai/test';
import { z } from 'zod';

const args = process.argv.slice(2);
const mode = args[0];
const opt = (name) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};

// The three model turns of one call: two parallel calls, one failing call, the answer.
function turns(tag) {
  return [
    [
      { type: 'text', text: `Looking up Paris (${tag}).` },
      { type: 'tool-call', toolCallId: `${tag}-w1`, toolName: 'weather', input: '{"city":"Paris"}' },
      { type: 'tool-call', toolCallId: `${tag}-t1`, toolName: 'local_time', input: '{"city":"Paris"}' },
    ],
    [{ type: 'tool-call', toolCallId: `${tag}-b1`, toolName: 'book', input: '{"city":"Paris","nights":2}' }],
    [{ type: 'text', text: `Paris is sunny; booking failed (${tag}).` }],
  ];
}

function finishOf(content) {
  const calls = content.some((p) => p.type === 'tool-call');
  return calls ? { unified: 'tool-calls', raw: 'tool_calls' } : { unified: 'stop', raw: 'stop' };
}

function generateModel(tag) {
  const script = turns(tag);
  let step = 0;
  return new MockLanguageModelV3({
    provider: 'mock-provider',
    modelId: 'mock-model',
    doGenerate: async () => {
      const content = script[Math.min(step++, script.length - 1)];
      return { content, finishReason: finishOf(content), usage, warnings: [] };
    },
  });
}

function streamModel(tag) {
  const script = turns(tag);
  let step = 0;
  return new MockLanguageModelV3({
    provider: 'mock-provider',
    modelId: 'mock-model',
    doStream: async () => {
      const content = script[Math.min(step++, script.length - 1)];
      const chunks = [{ type: 'stream-start', warnings: [] }];
      content.forEach((p, i) => {
        if (p.type === 'text') {
          chunks.push({ type: 'text-start', id: `t${i}` });
          chunks.push({ type: 'text-delta', id: `t${i}`, delta: p.text });
          chunks.push({ type: 'text-end', id: `t${i}` });
        } else {
          chunks.push(p);
        }
      });
      chunks.push({ type: 'finish', finishReason: finishOf(content), usage });
      return { stream: convertArrayToReadableStream(chunks) };
    },
  });
}

const tools = {
  weather: tool({
    description: 'Weather of a city',
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => ({ city, sky: 'sunny', celsius: 21 }),
  }),
  local_time: tool({
    description: 'Local time of a city',
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => `10:30 in ${city}`,
  }),
  book: tool({
    description: 'Book a hotel',
    inputSchema: z.object({ city: z.string(), nights: z.number() }),
    execute: async () => {
      throw new Error('no rooms left');
    },
  }),
};

const system = 'You are a travel agent. Be brief.';

function inputMessages(tag) {
  return [{ role: 'user', content: [{ type: 'text', text: `Weather and a hotel in Paris, please (${tag}).` }] }];
}

async function run() {
  const endpoint = opt('endpoint');
  const session = opt('session') ?? 'vercel-session';
  const record = opt('record');
  const resource = resourceFromAttributes({ 'service.name': 'vercel-ai-scenario' });
  const exporter = endpoint ? new OTLPTraceExporter({ url: `${endpoint}/v1/traces` }) : undefined;
  const memory = new InMemorySpanExporter();
  const processors = [new SimpleSpanProcessor(memory)];
  if (exporter) processors.push(new BatchSpanProcessor(exporter, { scheduledDelayMillis: 100 }));
  const provider = new BasicTracerProvider({ resource, spanProcessors: processors });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(provider);
  const tracer = provider.getTracer('ai');

  const out = { calls: [] };
  for (const kind of ['generate', 'stream']) {
    const tag = kind === 'generate' ? 'g' : 's';
    const messages = inputMessages(tag);
    const telemetry = {
      isEnabled: true,
      functionId: 'travel-agent',
      metadata: { sessionId: `${session}-${kind}`, userId: 'u1' },
      tracer,
    };
    let response;
    if (kind === 'generate') {
      const result = await generateText({
        model: generateModel(tag), system, messages, tools, stopWhen: stepCountIs(5),
        experimental_telemetry: telemetry,
      });
      response = result.response;
    } else {
      const result = streamText({
        model: streamModel(tag), system, messages, tools, stopWhen: stepCountIs(5),
        experimental_telemetry: telemetry,
      });
      await result.consumeStream();
      response = await result.response;
    }
    out.calls.push({
      kind, conversation_id: `${session}-${kind}`, system, input: messages,
      response_messages: response.messages,
    });
  }
  await provider.forceFlush();
  if (record) {
    const spans = memory.getFinishedSpans();
    writeFileSync(record, ProtobufTraceSerializer.serializeRequest(spans));
    out.recorded = spans.length;
  }
  await provider.shutdown();
  out.versions = {
    ai: JSON.parse(readFileSync(new URL(import.meta.resolve('ai/package.json')), 'utf8')).version,
  };
  console.log(JSON.stringify(out));
}

async function continueRun() {
  const { system: sys, messages } = JSON.parse(readFileSync(opt('file'), 'utf8'));
  let seen;
  const model = new MockLanguageModelV3({
    doGenerate: async (options) => {
      seen = options.prompt;
      return {
        content: [{ type: 'text', text: 'Tomorrow is rainy.' }],
        finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [],
      };
    },
  });
  const next = { role: 'user', content: [{ type: 'text', text: 'And tomorrow?' }] };
  const result = await generateText({ model, system: sys ?? undefined, messages: [...messages, next], tools });
  console.log(JSON.stringify({ text: result.text, prompt: seen }));
}

if (mode === 'run') await run();
else if (mode === 'continue') await continueRun();
else {
  console.error('usage: scenario.mjs run|continue ...');
  process.exit(2);
}
