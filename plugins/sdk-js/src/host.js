// The gateway's interfaces (package map-gateway:plugin of wit/). The
// specifiers carry no version on purpose: the build helper (build.mjs)
// appends the one wit/package.wit declares, so the contract version is
// written in one place. Every other module of the SDK imports them from here.
import * as store from 'map-gateway:plugin/store';
import * as events from 'map-gateway:plugin/events';
import * as router from 'map-gateway:plugin/router';
import * as log from 'map-gateway:plugin/log';
import * as config from 'map-gateway:plugin/config';
import * as timers from 'map-gateway:plugin/timers';
import * as metrics from 'map-gateway:plugin/metrics';

export { store, events, router, log, config, timers, metrics };
