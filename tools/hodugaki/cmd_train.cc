// hodugaki train MODEL --loss NAME --data FILE --batch B --steps S --lr LR [--optimizer sgd|adam|adamw ...]
//                [--checkpoint DIR [--every K] [--resume]] [-o OUT.onnx] ...
// Data-parallel training over MPI (`mpirun -np N hodugaki train ...`; alone it is a world of one
// rank): distributed::Trainer does the work; this file parses, reports and writes the results.
// Rank 0 prints the loss curve and writes the checkpoints and the trained model.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "commands.h"
#include "core/error.h"
#include "formats/model_io.h"
#include "formats/tensor_io.h"
#include "optimizer_options.h"

#ifdef HODU_HAVE_MPI
#include "distributed/training/trainer.h"
#endif

namespace hodu::gaki {
namespace {

struct TrainArgs {
  std::string model, loss, data, labels, params, out, losses_file, checkpoint, engine = "cpu";
  std::vector<std::string> inputs;
  int64_t batch = 0, steps = 0, every = 0, log_every = 1;
  float lr = 0;
  cli::OptimizerArgs opt;
  uint64_t seed = 0;
  bool no_shuffle = false, resume = false, no_overlap = false, verbose = false;
  int keep = 2, threads = 0;
  double bucket_mb = 25;
};

#ifdef HODU_HAVE_MPI
using namespace distributed;

// A rank that did not fail exits 0 when another did (run_agreed): the failing rank's exit 1 is the
// job's status, and a second nonzero exit would let mpirun kill the failing rank before it has
// printed why (CI saw the error line lost that way).
constexpr int kFailedElsewhereExit = 0;

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

// Model input -> array: --input IN=ARRAY, and --labels ARRAY for the input that takes the labels:
// the one input no array is named after, else the one integer input.
std::map<std::string, std::string> input_arrays(const TrainArgs& a, const std::vector<Value>& inputs,
                                                const ArrayData& data) {
  std::map<std::string, std::string> names;
  for (const auto& spec : a.inputs) {
    auto eq = spec.find('=');
    HODU_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(), ErrorCode::InvalidArgument,
               "--input '{}': expected INPUT=ARRAY (a model input and an array of {})", spec, a.data);
    names[spec.substr(0, eq)] = spec.substr(eq + 1);
  }
  if (a.labels.empty()) return names;
  HODU_CHECK(data.has(a.labels), ErrorCode::InvalidArgument, "--labels '{}': {} has no array of that name", a.labels,
             a.data);
  std::vector<std::string> unmatched, integer;
  for (const auto& in : inputs) {
    if (names.count(in.name)) continue;
    if (!data.has(in.name)) unmatched.push_back(in.name);
    if (dtype_is_integer(in.type.dtype)) integer.push_back(in.name);
  }
  const std::vector<std::string>& pick = unmatched.empty() ? integer : unmatched;
  HODU_CHECK(pick.size() == 1, ErrorCode::InvalidArgument,
             "--labels '{}': cannot tell which model input takes the labels ({} candidates); name it with --input "
             "INPUT={}",
             a.labels, pick.size(), a.labels);
  names[pick[0]] = a.labels;
  return names;
}

std::string describe_optimizer(const TrainArgs& a, const passes::OptimizerSpec& o) {
  std::string s = fmt::format("{} lr {}", a.opt.optimizer, a.lr);
  if (o.kind == passes::OptimizerSpec::Kind::SGD) {
    if (o.momentum != 0) s += fmt::format(" momentum {}", o.momentum);
    if (o.nesterov) s += " nesterov";
  }
  if (o.weight_decay != 0) s += fmt::format(" weight decay {}", o.weight_decay);
  return s;
}

int train(const TrainArgs& a) {
  Environment mpi;
  Communicator comm = Communicator::world();
  const bool root = comm.rank() == 0;
  std::unique_ptr<ArrayData> data;
  std::unique_ptr<Trainer> trainer;
  Model forward;
  try {
    run_agreed(comm, [&] {
      HODU_CHECK(a.lr > 0, ErrorCode::InvalidArgument, "--lr must be > 0 (got {})", a.lr);
      HODU_CHECK(a.log_every > 0, ErrorCode::InvalidArgument, "--log-every must be >= 1 (got {})", a.log_every);
      HODU_CHECK(std::filesystem::exists(a.model), ErrorCode::Io, "model '{}' does not exist", a.model);
      forward = load_model(a.model);
      data = std::make_unique<ArrayData>(ArrayData::load(a.data));
      std::vector<Value> inputs;
      for (const auto& in : forward.graph.inputs)
        if (!forward.graph.initializer(in.name)) inputs.push_back(in);
      data->bind(inputs, input_arrays(a, inputs, *data), a.batch);
      TrainOptions o;
      o.model.loss = a.loss;
      o.model.params = split_names(a.params);
      o.model.optimizer = cli::optimizer_spec(a.opt);
      o.model.bucket_mb = a.bucket_mb;
      o.model.overlap = !a.no_overlap;
      o.model.engine = a.engine;
      o.model.threads = a.threads;
      o.model.seed = a.seed;
      o.batch = a.batch;
      o.steps = a.steps;
      o.lr = a.lr;
      o.data_seed = a.seed;
      o.shuffle = !a.no_shuffle;
      o.checkpoint_dir = a.checkpoint;
      o.every = a.every;
      o.resume = a.resume;
      o.keep = a.keep;
      o.info["model"] = a.model;
      o.info["data"] = a.data;
      trainer = std::make_unique<Trainer>(forward, *data, o, comm);
    });
  } catch (const FailedElsewhere&) {
    return kFailedElsewhereExit;
  }
  Trainer& t = *trainer;
  DataParallel& dp = t.model();
  int64_t start = 0;
  try {
    start = t.restore();
  } catch (const FailedElsewhere&) {
    return kFailedElsewhereExit;
  }
  if (root) {
    const auto& sampler = t.sampler();
    std::printf("hodugaki train: %s on %d rank%s x %d thread%s (%s engine)\n", a.model.c_str(), comm.size(),
                comm.size() == 1 ? "" : "s", dp.threads(), dp.threads() == 1 ? "" : "s", a.engine.c_str());
    std::printf("  data: %s, %lld rows; global batch %lld (%lld per rank), %lld steps per epoch, %s\n", a.data.c_str(),
                static_cast<long long>(data->rows()), static_cast<long long>(sampler.global_batch()),
                static_cast<long long>(a.batch), static_cast<long long>(sampler.steps_per_epoch()),
                a.no_shuffle ? "in file order" : fmt::format("shuffled (seed {})", a.seed).c_str());
    int64_t elements = 0;
    for (const auto& b : dp.partition().buckets) elements += b.total_elements;
    std::printf("  %zu params (%s), %zu gradient bucket%s of up to %g MB; all-reduce %s\n", dp.params().size(),
                describe_optimizer(a, cli::optimizer_spec(a.opt)).c_str(), dp.partition().buckets.size(),
                dp.partition().buckets.size() == 1 ? "" : "s", a.bucket_mb,
                comm.size() == 1 ? "not needed (one rank)"
                : dp.overlapping() && dp.partition().buckets.size() > 1
                    ? "overlapped with the backward"
                    : dp.partition().buckets.size() == 1 ? "after the backward (one bucket: nothing to overlap)"
                                                         : "after the backward");
    if (a.verbose)
      for (size_t i = 0; i < dp.partition().buckets.size(); ++i) {
        const auto& b = dp.partition().buckets[i];
        std::string names;
        for (const auto& v : b.values) names += (names.empty() ? "" : ", ") + v;
        std::printf("  bucket %zu (%zu bytes, stage of %zu nodes): %s\n", i, b.bytes(),
                    dp.partition().stages[i].graph.nodes.size(), names.c_str());
      }
    if (auto from = t.restored_from())
      std::printf("  resumed from %s at step %lld\n", from->c_str(), static_cast<long long>(start));
    else if (a.resume)
      std::printf("  no checkpoint in %s: starting at step 0\n", a.checkpoint.c_str());
    std::fflush(stdout);
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    t.run([&](int64_t step, double loss) {
      if (root && ((step + 1) % a.log_every == 0 || step == start || step + 1 == a.steps)) {
        std::printf("step %lld/%lld  loss %.6f\n", static_cast<long long>(step + 1), static_cast<long long>(a.steps),
                    loss);
        std::fflush(stdout);
      }
    });
  } catch (const FailedElsewhere&) {
    return kFailedElsewhereExit;
  } catch (const std::exception& e) {
    // One rank failing mid-run leaves the others in a collective: end the job.
    if (comm.size() == 1) throw;
    std::fprintf(stderr, "error: rank %d: %s\n", comm.rank(), e.what());
    comm.abort(1);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const StepTimes& tm = dp.times();
  const ReduceStats& rs = dp.reduce_stats();
  auto per = [&](double ms) { return tm.steps ? ms / static_cast<double>(tm.steps) : 0.0; };
  std::string reduce;
  if (comm.size() > 1)
    reduce = fmt::format(", all-reduce {:.3f} of which {:.3f} exposed ({:.0f}% hidden)", per(rs.reduce_ms),
                         per(rs.exposed_ms),
                         rs.reduce_ms > 0 ? std::max(0.0, 100.0 * (1 - rs.exposed_ms / rs.reduce_ms)) : 0.0);
  const std::string timing =
      fmt::format("{:.3f} ms/step (forward+backward {:.3f}{}, update {:.3f})", per(tm.step_ms), per(tm.compute_ms),
                  reduce, per(tm.update_ms));
  if (a.verbose) {
    std::fprintf(stderr, "rank %d: %s\n", comm.rank(), timing.c_str());
    comm.barrier();
  }
  if (!root) return 0;
  std::printf("done: %lld steps in %.2f s, %s\n", static_cast<long long>(tm.steps), seconds, timing.c_str());
  if (!t.checkpoints_written().empty()) std::printf("checkpoint: %s\n", t.checkpoints_written().back().c_str());
  std::string out = a.out;
  if (out.empty()) out = std::filesystem::path(a.model).stem().string() + ".trained.onnx";
  save_model(dp.trained_model(), out);
  std::printf("wrote %s\n", out.c_str());
  if (!a.losses_file.empty()) {
    const auto& l = t.losses();
    write_tensor_file(a.losses_file, {{"losses", Tensor::from_vector(DType::F64, {static_cast<int64_t>(l.size())}, l)}});
    std::printf("wrote %s (%zu losses)\n", a.losses_file.c_str(), l.size());
  }
  return 0;
}
#endif

}  // namespace

CommandFn add_train_command(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  app.footer(
      "Run it under MPI: mpirun -np N hodugaki train ... (alone it trains in one process). Each rank takes\n"
      "--batch rows of every global batch of N x --batch rows; the gradients are averaged over the ranks, so\n"
      "with a loss that is the batch's mean the run matches one process with N x --batch (same --seed).\n"
      "Rank 0 prints the losses and writes the checkpoints and the trained model. See docs/hodugaki.md.");
  app.add_option("model", a->model, "forward model computing the loss (.onnx .hdss .hodu), exported in training mode")
      ->required();
  app.add_option("--loss", a->loss, "the loss value of the model: one number, the batch's mean")->required();
  app.add_option("--data", a->data, "training data: arrays of one row per sample (.npz .safetensors .hdt), fed to "
                                    "the model inputs of the same names")
      ->required();
  app.add_option("--labels", a->labels, "the array holding the labels, fed to the model input no array is named "
                                        "after (or its only integer input)");
  app.add_option("--input", a->inputs, "feed model input INPUT from array ARRAY (INPUT=ARRAY); repeatable");
  app.add_option("--batch", a->batch, "rows per rank per step")->required()->check(CLI::PositiveNumber);
  app.add_option("--steps", a->steps, "steps in all (a resumed run continues to this count)")
      ->required()
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", a->lr, "learning rate")->required();
  a->opt.optimizer = "sgd";
  cli::add_optimizer_options(app, a->opt, "sgd (default), adam or adamw (PyTorch 1.13's update rules)");
  app.add_option("--params", a->params, "params to train, comma-separated (default: every float initializer but "
                                        "batch-norm statistics and exporter constants)");
  app.add_option("--seed", a->seed, "seed of the data shuffling and of random ops (rank r draws from seed + r)")
      ->capture_default_str();
  app.add_flag("--no-shuffle", a->no_shuffle, "read the rows in file order, epoch after epoch");
  app.add_option("--checkpoint", a->checkpoint, "write checkpoints into DIR/step-NNNNNNNN (rank 0), after the last "
                                                "step and every --every steps");
  app.add_option("--every", a->every, "checkpoint every K steps")->check(CLI::NonNegativeNumber);
  app.add_flag("--resume", a->resume, "continue from the newest checkpoint in --checkpoint DIR (from step 0 if "
                                      "there is none)");
  app.add_option("--keep", a->keep, "checkpoints kept (0: all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("-o,--output", a->out, "the trained model (default: MODEL's name + .trained.onnx, here); its "
                                        "extension picks the format");
  app.add_option("--losses", a->losses_file, "write every step's loss to this file (.npy .json ...)");
  app.add_option("--log-every", a->log_every, "print the loss every N steps")->capture_default_str();
  app.add_option("--bucket-mb", a->bucket_mb, "gradient bucket size in MB; buckets are all-reduced while the "
                                              "backward goes on (0: one bucket)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-overlap", a->no_overlap, "all-reduce the buckets after the whole backward");
  app.add_option("--threads", a->threads, "kernel threads per rank (default: physical cores / ranks on the host)");
  app.add_option("--engine", a->engine, "hodu engine (cpu, interp)")->capture_default_str();
  app.add_flag("-v,--verbose", a->verbose, "print the buckets, and each rank's times at the end");
#ifdef HODU_HAVE_MPI
  return [a] { return train(*a); };
#else
  return [a]() -> int {
    fail(ErrorCode::Unsupported,
         "this hodugaki was built without MPI, so it cannot train: install Debian's libopenmpi-dev and openmpi-bin "
         "(scripts/setup.sh) and rebuild");
  };
#endif
}

}  // namespace hodu::gaki
