# worker_smoke.cmake - runs `zps-worker --local ...`, checks the final line
# and the metrics stream (JSON lines: one "run", one "step" per clock in
# order with every timing field, "eval" lines ending with a final one), then
# removes the metrics file.
#
#   cmake -DWORKER=path -DARGS="a|b|c" -DCLOCKS=K -DEXPECT=regex
#         -DMETRICS=file [-DNEEDS=file] -P worker_smoke.cmake
#
# When NEEDS (a data file) is absent it prints "skipped:", which the test's
# SKIP_REGULAR_EXPRESSION turns into a skip.

if(DEFINED NEEDS AND NOT EXISTS "${NEEDS}")
  message("skipped: ${NEEDS} is not installed")
  return()
endif()
string(REPLACE "|" ";" args "${ARGS}")
file(REMOVE "${METRICS}")
execute_process(COMMAND "${WORKER}" ${args} --metrics "${METRICS}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "zps-worker exited with ${rc}\n${out}\n${err}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "output does not match '${EXPECT}':\n${out}\n${err}")
endif()
message("${out}")

file(STRINGS "${METRICS}" lines)
set(runs 0)
set(steps 0)
set(evals 0)
set(last_final "")
foreach(line IN LISTS lines)
  string(JSON type GET "${line}" type)
  if(type STREQUAL "run")
    math(EXPR runs "${runs} + 1")
  elseif(type STREQUAL "step")
    string(JSON clock GET "${line}" clock)
    if(NOT clock EQUAL steps)
      message(FATAL_ERROR "step line ${steps} has clock ${clock}")
    endif()
    foreach(key rank epoch step wall elapsed loss batch version clock_lag data_ms forward_ms
        backward_ms copy_ms pull_ms push_ms update_ms delay_ms step_ms)
      string(JSON v ERROR_VARIABLE jerr GET "${line}" ${key})
      if(jerr)
        message(FATAL_ERROR "step ${clock}: no '${key}': ${line}")
      endif()
    endforeach()
    math(EXPR steps "${steps} + 1")
  elseif(type STREQUAL "eval")
    string(JSON acc GET "${line}" test_accuracy)
    string(JSON loss GET "${line}" test_loss)
    string(JSON last_final GET "${line}" final)
    math(EXPR evals "${evals} + 1")
  else()
    message(FATAL_ERROR "unknown line type '${type}': ${line}")
  endif()
endforeach()
file(REMOVE "${METRICS}")
if(NOT runs EQUAL 1 OR NOT steps EQUAL CLOCKS OR evals LESS 1 OR NOT last_final STREQUAL "ON")
  message(FATAL_ERROR
    "metrics: ${runs} run lines, ${steps} step lines (want ${CLOCKS}), ${evals} eval lines, "
    "last final '${last_final}'")
endif()
message("metrics: 1 run line, ${steps} step lines, ${evals} eval lines")
