#pragma once

// A repository folder holding a Hugging Face model, loaded as a language model
// (lm_repository.cpp; model_repository::load_repository calls it for every folder).

#include <cotensor/serving.hpp>

#include <filesystem>
#include <memory>
#include <string>

namespace cotensor::serving::detail {

// The language model in `folder`, served as `name`, or null when `folder` is not a Hugging Face
// model folder (its config.json names no `architectures`). Reads `folder/cotensor.json` when
// there is one. Blocks until the weights are read. Throws model_error naming the file.
std::shared_ptr<language_model> load_language_model_folder(const std::filesystem::path& folder,
                                                           const std::string& name,
                                                           cotensor::device placement);

}  // namespace cotensor::serving::detail
