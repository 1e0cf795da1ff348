// The npm client @zeldafan0225/ai_horde (5.2.0) on both sides of the native text flow.
// Run as `node ai_horde_driver.mjs API_URL REQUESTER_KEY WORKER_KEY WORKER MODEL` with
// NODE_PATH-free resolution: the test passes the package's folder as AI_HORDE_NPM. It
// submits, pops, submits the reply and reads the status, cancels a second request, then
// reads findUser, the workers, getModel, the stats, the load, the modes and the news.
// Prints one JSON object; any refused call throws (the client's APIError).
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.AI_HORDE_NPM, "package.json"));
const { AIHorde } = require("@zeldafan0225/ai_horde");

const [apiUrl, requesterKey, workerKey, worker, model] = process.argv.slice(2);
const horde = new AIHorde({ api_route: apiUrl, client_agent: "horde-chat-tests:1:tests" });
const out = {};

out.find_user = await horde.findUser({ token: workerKey });
const queued = await horde.postAsyncTextGenerate(
  { prompt: "Tell me a story.", models: [model], params: { max_length: 80 } },
  { token: requesterKey },
);
let job = { id: null };
for (let i = 0; i < 100 && !job.id; i++) {
  job = await horde.postTextGenerationPop(
    { name: worker, models: [model], max_length: 512, max_context_length: 2048 },
    { token: workerKey },
  );
}
const reward = await horde.postTextGenerationSubmit(
  { id: job.id, generation: "A reply written by the npm worker.", state: "ok" },
  { token: workerKey },
);
const status = await horde.getTextGenerationStatus(queued.id, { force: true });
out.flow = { kudos: queued.kudos, prompt: job.payload.prompt, reward: reward.reward, status };

const other = await horde.postAsyncTextGenerate({ prompt: "Cancel me.", models: [model] }, { token: requesterKey });
out.cancelled = await horde.deleteTextGenerationRequest(other.id);

out.workers = await horde.getWorkers();
out.worker = await horde.getWorkerDetails(out.workers[0].id, { force: true });
out.model = await horde.getModel(model);
out.models = await horde.getModels({ force: true });
out.text_totals = await horde.getTextTotalStats();
out.text_models = await horde.getTextModelStats();
out.performance = await horde.getPerformance({ force: true });
out.modes = await horde.getModes({ force: true });
out.news = await horde.getNews({ force: true });
console.log(JSON.stringify(out));
