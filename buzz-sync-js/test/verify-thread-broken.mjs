// A verify thread whose script fails as it starts (as a thread that cannot load its module
// would), for the unit tests of nodeVerifyWorker's fallback: the round then checks on the
// calling thread. (`node --test test/` also loads this file on the main thread: there it does
// nothing.)
import { isMainThread } from "node:worker_threads";

if (!isMainThread) throw new Error("this verify thread cannot start");
