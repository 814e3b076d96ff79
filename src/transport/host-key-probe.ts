import { Client } from 'ssh2';

/** The host key a guest's sshd presents (the connection ends at its check: nothing is sent to it). */
export function presentedHostKey(host: string, port: number, timeoutMs: number): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const client = new Client();
    let key: Buffer | undefined;
    const done = () => {
      client.end();
      resolve(key);
    };
    client.on('error', done);
    client.on('close', done);
    client.on('ready', done);
    client.connect({
      host,
      port,
      username: 'sbx-probe',
      readyTimeout: timeoutMs,
      algorithms: { serverHostKey: ['ssh-ed25519'] },
      hostVerifier: (presented: Buffer) => {
        key = presented;
        return false;
      },
    });
  });
}
