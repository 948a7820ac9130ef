// BullMQ side of bench/bullmq_peer.py: add N jobs, then process them, no fetching.
//
//   node run.js PORT N
//
// 1. adds N jobs ({url}, the 60-character URLs of bench/claim_throughput.py over 100
//    domains) with Queue.addBulk in batches of 500, removeOnComplete set;
// 2. makes a Worker (concurrency 64, autorun off) whose processor returns at once, waits until
//    it is connected, prints "added" and waits for a line on stdin (the harness reads Redis's
//    counters then);
// 3. runs the worker until N jobs completed;
// 4. prints "done SECONDS" (the processing phase, worker.run() to the last job), waits
//    for a second line, then closes the worker and the queue and exits (status 1 if a job
//    failed).
'use strict';
const readline = require('node:readline');
const { Queue, Worker } = require('bullmq');

const DOMAINS = 100;
const CHUNK = 500;
const CONCURRENCY = 64;

function urlFor(i) {
  const d = String(i % DOMAINS).padStart(3, '0');
  return `https://d${d}.example.com/catalogue/item/${String(i).padStart(21, '0')}`;
}

function nextLine(rl) {
  return new Promise((resolve) => rl.once('line', resolve));
}

async function main() {
  const port = Number(process.argv[2]);
  const n = Number(process.argv[3]);
  if (!Number.isInteger(port) || !Number.isInteger(n) || n < 1) {
    console.error('usage: node run.js PORT N');
    process.exit(2);
  }
  const connection = { host: '127.0.0.1', port, maxRetriesPerRequest: null };
  const queue = new Queue('bench', { connection });
  const opts = { removeOnComplete: true, removeOnFail: true };
  for (let start = 0; start < n; start += CHUNK) {
    const jobs = [];
    for (let i = start; i < Math.min(n, start + CHUNK); i++) {
      jobs.push({ name: 'fetch', data: { url: urlFor(i) }, opts });
    }
    await queue.addBulk(jobs);
  }
  let completed = 0;
  let failed = 0;
  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const worker = new Worker('bench', async () => null,
    { connection, concurrency: CONCURRENCY, autorun: false });
  await worker.waitUntilReady();
  const rl = readline.createInterface({ input: process.stdin });
  process.stdout.write('added\n');
  await nextLine(rl);

  const t0 = process.hrtime.bigint();
  const running = worker.run();
  worker.on('completed', () => { if (++completed + failed === n) finish(); });
  worker.on('failed', () => { if (completed + ++failed === n) finish(); });
  worker.on('error', (err) => { console.error(`bullmq worker: ${err.message}`); });
  await finished;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  process.stdout.write(`done ${seconds}\n`);
  await nextLine(rl); // the harness has read Redis's counters
  await worker.close();
  await running;
  await queue.close();
  rl.close();
  if (failed) {
    console.error(`bullmq: ${failed} of ${n} jobs failed`);
    process.exit(1);
  }
}

main().catch((err) => {
  console.error(`bullmq: ${err.message}`);
  process.exit(1);
});
