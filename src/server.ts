// Assembles the HTTP server: provisioning endpoint and health. It does not listen; main does.
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from './logger.js';
import { provisioningRoutes } from './provisioning/http.js';
import type { ProvisioningCore } from './provisioning/operations.js';
import type { PartnerDirectory } from './provisioning/partners.js';

export const BODY_LIMIT_BYTES = 1024 * 1024;

export interface AppDeps {
  log: Logger;
  core: ProvisioningCore;
  partners: PartnerDirectory;
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.log as FastifyBaseLogger,
    bodyLimit: BODY_LIMIT_BYTES,
    exposeHeadRoutes: false,
  });
  // The spec's calls are GETs with a JSON body; Fastify ignores GET bodies unless told.
  app.addHttpMethod('GET', { hasBody: true, overrideExisting: true });
  // An empty body with a JSON content type is "no body", so health and ops GETs still work.
  const jsonParser = app.getDefaultJsonParser('error', 'error');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body.toString();
    if (text.trim() === '') {
      done(null, undefined);
      return;
    }
    jsonParser(request, text, done);
  });
  app.get('/healthz', async () => ({ status: 'ok' }));
  await app.register(provisioningRoutes({ core: deps.core, partners: deps.partners }));
  return app;
}
