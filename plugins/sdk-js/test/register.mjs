// Node stands in for the gateway in unit tests: the gateway's interfaces
// (`map-gateway:plugin/<name>`) resolve to the mocks in ./mock.
import { register } from 'node:module';

register('./hooks.mjs', import.meta.url);
