// tests/it_cloudevents.c's consumer: reads every message of a queue as a
// CloudEvents AMQP binary-mode consumer would, builds the event with the
// CloudEvents SDK (which validates it) and prints one JSON line per message.
//
// Usage: node consume.js AMQP_URL QUEUE COUNT TIMEOUT_MS
// Waits up to TIMEOUT_MS for COUNT messages, then reads whatever else the
// queue holds, deletes the queue, and ends with {"done":true,"messages":N}.
'use strict';
const amqp = require('amqplib');
const { CloudEvent } = require('cloudevents');

// The binding lets a sender use either separator (one per message).
const PREFIXES = ['cloudEvents_', 'cloudEvents:'];

function attributes(msg) {
  const attrs = {};
  const names = [];
  for (const [key, value] of Object.entries(msg.properties.headers || {})) {
    const prefix = PREFIXES.find((p) => key.startsWith(p));
    if (prefix === undefined) continue;
    names.push(key);
    attrs[key.slice(prefix.length)] =
      Buffer.isBuffer(value) ? value.toString('utf8') : value;
  }
  // Binary mode: datacontenttype is the message's content-type property.
  if (msg.properties.contentType !== undefined)
    attrs.datacontenttype = msg.properties.contentType;
  return { attrs, names: names.sort() };
}

function report(msg) {
  const { attrs, names } = attributes(msg);
  const line = {
    message_id: msg.properties.messageId || '',
    ce_headers: names.join(','),
    body_hex: msg.content.toString('hex'),
    valid: false,
    error: '',
  };
  for (const [k, v] of Object.entries(attrs)) line['attr_' + k] = String(v);
  try {
    // The constructor validates (strict); validate() says so again.
    const ev = new CloudEvent({ ...attrs, data: msg.content });
    line.valid = ev.validate();
    for (const k of ['id', 'source', 'type', 'subject', 'time',
      'specversion', 'datacontenttype'])
      if (ev[k] !== undefined) line['sdk_' + k] = String(ev[k]);
  } catch (e) {
    line.error = `${e.message} ${JSON.stringify(e.errors || '')}`;
  }
  process.stdout.write(JSON.stringify(line) + '\n');
}

async function main() {
  const [url, queue, countArg, timeoutArg] = process.argv.slice(2);
  const want = Number(countArg);
  const deadline = Date.now() + Number(timeoutArg);
  const conn = await amqp.connect(url);
  let n = 0;
  try {
    const ch = await conn.createChannel();
    for (;;) {
      const msg = await ch.get(queue, { noAck: true });
      if (msg !== false) {
        report(msg);
        n++;
      } else if (n >= want || Date.now() >= deadline) {
        break;
      } else {
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    await ch.deleteQueue(queue);
  } finally {
    await conn.close();
  }
  process.stdout.write(JSON.stringify({ done: true, messages: n }) + '\n');
}

main().catch((e) => {
  process.stderr.write(`consume.js: ${e.stack || e}\n`);
  process.exit(1);
});
