// A URLFrontier client that is not ours: Node.js with @grpc/grpc-js and @grpc/proto-loader,
// loading scrapeq's urlfrontier.proto. It puts N discovered URLs over H hosts, drains them
// with GetURLs (each served URL leased), acks each with a KnownURLItem that carries its
// metadata back (the lease), checks that a second ack of the same lease is refused (FAIL),
// and checks GetStats before and after. Run by tests/interfaces/test_frontier_node.py:
//
//   node frontier_client.js HOST:PORT PATH/TO/urlfrontier.proto N H
//
// Prints one JSON line of what it saw; exits 1 (with the reason on stderr) on a failed check.
'use strict';

const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const [target, protoPath, nText, hostsText] = process.argv.slice(2);
const N = Number(nText || 10000);
const HOSTS = Number(hostsText || 100);
const CRAWL = 'NODE';
const STATUS = { OK: 0, SKIPPED: 1, FAIL: 2 };

function check(ok, what) {
  if (!ok) throw new Error(`check failed: ${what}`);
}

function unary(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + 30000 }, (err, reply) =>
      err ? reject(err) : resolve(reply));
  });
}

// One PutURLs stream: write every item (respecting flow control), collect the acks.
function putURLs(client, items) {
  return new Promise((resolve, reject) => {
    const acks = [];
    const call = client.PutURLs({ deadline: Date.now() + 120000 });
    call.on('data', (ack) => acks.push(ack));
    call.on('error', reject);
    call.on('end', () => resolve(acks));
    let i = 0;
    const pump = () => {
      while (i < items.length) {
        if (!call.write(items[i++])) {
          call.once('drain', pump);
          return;
        }
      }
      call.end();
    };
    pump();
  });
}

function getURLs(client, params) {
  return new Promise((resolve, reject) => {
    const got = [];
    const call = client.GetURLs(params, { deadline: Date.now() + 30000 });
    call.on('data', (info) => got.push(info));
    call.on('error', reject);
    call.on('end', () => resolve(got));
  });
}

const statusOf = (ack) => (typeof ack.status === 'string' ? STATUS[ack.status] : ack.status);

async function main() {
  const definition = protoLoader.loadSync(protoPath, {
    keepCase: true, longs: Number, enums: Number, defaults: true, oneofs: true,
  });
  const api = grpc.loadPackageDefinition(definition).urlfrontier;
  const client = new api.URLFrontier(target, grpc.credentials.createInsecure());
  const started = Date.now();

  const urls = [];
  for (let i = 0; i < N; i++) urls.push(`http://h${i % HOSTS}.node.test/page/${i}`);
  const items = urls.map((url, i) => ({
    ID: `put-${i}`,
    discovered: { info: { url, crawlID: CRAWL, metadata: { n: { values: [String(i)] } } } },
  }));
  const putAcks = await putURLs(client, items);
  check(putAcks.length === N, `${putAcks.length} acks for ${N} URLs`);
  check(putAcks.every((a, i) => a.ID === `put-${i}` && statusOf(a) === STATUS.OK),
    'every put acked OK, in order');
  const before = await unary(client, 'GetStats', { crawlID: CRAWL });
  check(Number(before.size) === N, `size ${before.size} after the put`);
  const putMs = Date.now() - started;

  // drain: serve with leases, ack each with its lease carried back in the metadata
  const acked = new Set();
  let first = null;
  let rounds = 0;
  const drainStart = Date.now();
  while (acked.size < N) {
    rounds += 1;
    check(Date.now() - drainStart < 120000, `drained ${acked.size} of ${N} in 120 s`);
    const served = await getURLs(client, {
      crawlID: CRAWL, max_queues: HOSTS, max_urls_per_queue: 10, delay_requestable: 120,
    });
    if (served.length === 0) continue;
    for (const info of served) {
      check(!acked.has(info.url), `${info.url} served again after its ack`);
      check(info.metadata['scrapeq.lease'], 'a served URL carries its lease');
      check(info.metadata.n.values[0] === info.url.split('/').pop(), 'metadata kept');
    }
    const updates = served.map((info) => ({
      ID: info.url,
      known: { info: { url: info.url, key: info.key, crawlID: CRAWL, metadata: info.metadata },
        refetchable_from_date: 0 },
    }));
    const acks = await putURLs(client, updates);
    check(acks.length === served.length && acks.every((a) => statusOf(a) === STATUS.OK),
      'every update acked OK');
    served.forEach((info) => acked.add(info.url));
    if (first === null) first = updates[0];
  }
  const drainMs = Date.now() - drainStart;

  // the same lease a second time: settled already, so refused (FAIL), not applied
  const again = await putURLs(client, [first]);
  check(again.length === 1 && statusOf(again[0]) === STATUS.FAIL, 'a stale lease is FAIL');

  const after = await unary(client, 'GetStats', { crawlID: CRAWL });
  check(Number(after.size) === 0 && Number(after.inProcess) === 0, 'nothing left queued');
  check(Number(after.counts.done) === N, `done ${after.counts.done}`);
  const status = await unary(client, 'GetURLStatus', { url: urls[0], crawlID: CRAWL });
  check(Number(status.known.refetchable_from_date) === 0, 'a completed URL: never again');
  const crawls = await unary(client, 'ListCrawls', {});
  check(crawls.values.includes(CRAWL), 'the crawl is listed');
  client.close();
  console.log(JSON.stringify({
    put: N, acked: acked.size, rounds, queues: Number(before.numberOfQueues),
    done: Number(after.counts.done), put_ms: putMs, drain_ms: drainMs,
  }));
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
});
