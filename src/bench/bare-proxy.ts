/**
 * The floor of one hop, for the gateway figures (issue 22): a process that forwards every
 * request to one URL with node:http and a keep-alive agent, piping both ways, and does nothing
 * else (no auth, no routing, no directory, no logging, no metrics). What the gateway adds over
 * a straight request, this adds at least: the extra process's wake-ups and loopback writes.
 *
 * Run as its own process by the bench: `node bare-proxy.js <port> <target-url>`; it prints
 * "listening" once it is.
 */
import http from 'node:http';

const [portArg, target] = process.argv.slice(2);
if (portArg === undefined || target === undefined) throw new Error('usage: bare-proxy.js <port> <target-url>');
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
const server = http.createServer((req, res) => {
  const upstream = http.request(`${target}${req.url ?? '/'}`, { method: req.method, headers: req.headers, agent }, (answer) => {
    res.writeHead(answer.statusCode ?? 502, answer.headers);
    answer.pipe(res);
  });
  upstream.on('error', () => res.destroy());
  req.pipe(upstream);
});
server.listen(Number(portArg), '127.0.0.1', () => console.log('listening'));
