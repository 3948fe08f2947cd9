// hodu devices [--json]: the CPU (model, cores, ISA, caches) and the CUDA
// devices found through the dlopen'd CUDA runtime.
#include <nlohmann/json.hpp>

#include <cstdio>

#include "commands.h"
#include "runtime/device_manager.h"

namespace hodu::cli {

CommandFn add_devices_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "print JSON");
  return [json] {
    const DeviceReport& r = DeviceManager::instance().report();
    if (*json)
      std::printf("%s\n", r.to_json().dump(2).c_str());
    else
      std::printf("%s", r.to_text().c_str());
    return 0;
  };
}

}  // namespace hodu::cli
